"""One root step: the reply read whole or as it streams, its cells, approval,
running each code cell, the answer under the protocol's rules, and the
feedback (with the images the root model is shown). A step reaches its run
through ``step.StepContext``, never the run itself.

May import: every subpackage but ``runs``.
"""
