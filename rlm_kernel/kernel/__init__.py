"""The RLM kernel: an IPython kernel (``ipkernel.py``) with the ``%rlm`` /
``%%rlm`` magics (``magics.py``), the runs those cells start
(``cell_runs.py``, ``continuing.py``), what it keeps between cells
(``session.py``: the replay book, pins, the page's cells), the sub-call
helpers in a person's own cells (``person_cells.py``) and generated cells run
so their outputs stream into the page (``executor.py``)."""
