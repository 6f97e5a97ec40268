"""Infrastructure the looplift services share: one implementation each of atomic file writes, of a
uvicorn server in a background thread, of child processes that die with their parent, and of turning
SIGTERM/SIGINT/SIGHUP into an orderly shutdown, of OpenAPI documents that list every status a route answers
(`error_responses`, `json_body`, `finish_openapi`); and for the command lines, of failing with one line
(`cli_fail`), of printing a table whole in a log (`print_table`) and of loading an object named
`PKG.MODULE:ATTR` (`import_object`); and of a ledger of the expensive things a process started (`record_cost`:
vLLM servers, model builds, image builds, whole stacks), which the test suite counts against its budget.

Applications do not need this module; `server`, `collector`, `trainer` and `looplift` import it so that
each of these jobs is done one way (the same fsync behaviour everywhere, the same thread-server
start-up and shutdown). It lives in the SDK because that is the one layer every other package may import.
Importing it needs nothing beyond the SDK's own dependencies: uvicorn is imported when a server starts, FastAPI
when a document is built.
"""

from .._home import ensure_secret, read_secret
from ._cli import cli_fail
from ._cost import COST_LOG_ENV, COST_TAG_ENV, env_without_config, record_cost
from ._files import atomic_dir, atomic_open, atomic_write, atomic_write_json
from ._imports import import_object
from ._openapi import error_responses, finish_openapi, json_body
from ._signals import Shutdown, shutdown_on_signals
from ._tables import print_table
from ._threads import ServerThread, ServerThreadError, start_server_thread
from ._tied import TiedProcess, die_with_parent, spawn_tied

__all__ = [
    "COST_LOG_ENV",
    "COST_TAG_ENV",
    "ServerThread",
    "ServerThreadError",
    "Shutdown",
    "TiedProcess",
    "atomic_dir",
    "atomic_open",
    "atomic_write",
    "atomic_write_json",
    "cli_fail",
    "die_with_parent",
    "ensure_secret",
    "env_without_config",
    "error_responses",
    "finish_openapi",
    "import_object",
    "json_body",
    "print_table",
    "read_secret",
    "record_cost",
    "shutdown_on_signals",
    "spawn_tied",
    "start_server_thread",
]
