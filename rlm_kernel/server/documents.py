"""The shared notebooks of real-time collaboration, through
jupyter-collaboration's own API: the ``YDocExtension`` of the running server
(``jupyter_server_ydoc``), its ``get_document(..., copy=False, create=True)``
(the live ``YNotebook`` every page of the notebook shares, its room made
when no page has it open) and its rooms.

A room whose last page left is deleted a minute later (the handler's
``cleaner``); a run that writes into it meanwhile keeps it: the cleaner is
cancelled, as a page that comes back cancels it. The room saves the
document to its file a second after its last change, by itself.
"""

from __future__ import annotations

from typing import Any

FILE_FORMAT, CONTENT_TYPE = "json", "notebook"


class SharedNotebooks:
    def __init__(self, serverapp: Any) -> None:
        self.serverapp = serverapp
        self._rooms: dict[str, tuple[Any, Any]] = {}  # room id -> (room, its YNotebook)

    def collaboration(self) -> Any:
        """The server's ``YDocExtension`` when real-time collaboration is on, else None."""
        manager = getattr(self.serverapp, "extension_manager", None)
        apps = manager.extension_apps.get("jupyter_server_ydoc", set()) if manager is not None else set()
        for app in apps:
            if not getattr(app, "disable_rtc", True) and getattr(app, "ywebsocket_server", None) is not None:
                return app
        return None

    def room_id(self, path: str) -> str | None:
        from jupyter_server_ydoc.utils import encode_file_path, room_id_from_encoded_path

        ids = self.serverapp.web_app.settings.get("file_id_manager")
        file_id = ids.index(path) if ids is not None else None
        return room_id_from_encoded_path(encode_file_path(FILE_FORMAT, CONTENT_TYPE, file_id)) if file_id else None

    async def notebook(self, path: str) -> Any:
        """The shared ``YNotebook`` of ``path`` (its room made if no page has
        it open), or None without collaboration."""
        app = self.collaboration()
        room_id = self.room_id(path) if app is not None else None
        if room_id is None:
            return None
        rooms = app.ywebsocket_server.rooms
        known = self._rooms.get(room_id)
        if known is not None and rooms.get(room_id) is known[0]:
            return known[1]
        notebook = await app.get_document(room_id=room_id, copy=False, create=True)
        self._rooms[room_id] = (rooms.get(room_id), notebook)
        return notebook

    def keep(self, path: str) -> None:
        """A run writes into ``path``'s room: it stays, though no page is open."""
        room_id = self.room_id(path)
        known = self._rooms.get(room_id) if room_id else None
        cleaner = getattr(known[0], "cleaner", None) if known else None
        if cleaner is not None and not cleaner.done():
            cleaner.cancel()


__all__ = ["SharedNotebooks"]
