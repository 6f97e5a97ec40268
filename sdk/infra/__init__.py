"""Infrastructure the looplift services share: one implementation each of atomic file writes and of
a uvicorn server in a background thread.

Applications do not need this module; `server`, `collector`, `trainer` and `looplift` import it so that
each of these jobs is done one way (the same fsync behaviour everywhere, the same thread-server
start-up and shutdown). It lives in the SDK because that is the one layer every other package may import.
Importing it needs nothing beyond the SDK's own dependencies: uvicorn is imported when a server starts.
"""

from .._home import ensure_secret, read_secret
from ._files import atomic_dir, atomic_open, atomic_write, atomic_write_json
from ._threads import ServerThread, ServerThreadError, start_server_thread

__all__ = [
    "ServerThread",
    "ServerThreadError",
    "atomic_dir",
    "atomic_open",
    "atomic_write",
    "atomic_write_json",
    "ensure_secret",
    "read_secret",
    "start_server_thread",
]
