"""A dependency-free reference implementation of AReaL's worker-side guard HTTP server.

AReaL's own guard (``python -m areal.infra.rpc.rpc_server``) needs torch, so it cannot run in
the tests' virtualenv or in lightweight demo containers.  This package speaks the same HTTP API
(same routes, request fields, status codes and reply keys) with the standard library only::

    python -m localworker.reference_guard --host 127.0.0.1 --port 0 \\
        --experiment-name exp --trial-name trial --role actor --worker-index 0

The first line on stdout is ``areal-guard listening on HOST:PORT``; forked children's output
follows on stdout, as AReaL streams it there.  Everything else (one line per request: method,
path, status, milliseconds) goes to stderr.

tests/unit/guard/test_guard_conformance.py sends the same requests to this server and to AReaL's
(areal 1.0.4) and compares the answers.  Behaviour taken from AReaL, including its rough edges:

* Request bodies are read as Flask's ``request.get_json(silent=True)`` reads them: only with a
  JSON Content-Type.  The guard routes (/alloc_ports, /fork, /kill_forked_worker, /set_env,
  /configure) answer 400 "Invalid JSON in request body" to a missing or unreadable body; the engine
  routes (/create_engine, /call) treat it as ``{}``, i.e. as missing fields.  A JSON body that is
  not an object is a 500, as AReaL fails on it.
* Errors are ``{"error": "..."}`` (plus ``pid`` when a kill failed); messages follow AReaL's, and
  AReaL's catch-all failures are 500 "Internal server error: ...".
* /set_env runs at once in the request thread, also while an engine call runs: AReaL's guard
  registers /set_env before the engine blueprint's serialized variant, so the guard's wins.
  /configure, /create_engine's constructor and /call run one at a time on a single engine thread.
* /configure reads ``config.seed`` of the deserialized config, so the config must be a serialized
  dataclass (``{"type": "dataclass", "class_path", "data"}``) whose data has a ``seed``; anything
  else is a 500.  ``rank`` may be any value; the role is the guard's own --role.
* /alloc_ports hands out ports in 10000-32767 (below Linux's ephemeral range), never the same port
  twice; ``count`` is checked as ``isinstance(count, int) and count > 0``, so ``true`` means 1;
  more ports than the range holds is a 500.
* /fork always starts the command (through ``/bin/sh -c 'exec "$@"'``): a missing executable
  is a child that exits with 127, not an error.  Its output goes to the guard's stdout,
  ``<fileroot or /tmp>/logs/<user>/<experiment>/<trial>/<role>.log`` and, prefixed with
  ``[role]``, ``merged.log`` in the same directory.  A second fork of a (role, worker_index)
  replaces the entry: /kill_forked_worker then stops the newest, the older child is still counted
  by ``forked_children`` and stopped at shutdown.  A kill that fails forgets the child.
* /call: an AttributeError while looking up or running the method is 400 "Engine does not have
  method"; a non-bool ``rpc_meta.broadcast`` is found only after the engine (404 first) and is a 500.

Differences that remain, deliberately or because the stand-in has no torch:

* Any class can be an engine: AReaL answers 400 unless the class subclasses its TrainEngine or
  InferenceEngine, which cannot be imported without torch.
* Values are plain JSON.  AReaL's typed payloads (tensors, arrays, dataclasses serialized as
  ``{"type": ...}`` dicts, RTensor references to ``/data/<id>``) arrive as ordinary dicts, results
  must be JSON-serializable, and /configure does not import the config's class (AReaL fails with a
  500 when its worker cannot).  ``rpc_meta.broadcast`` is validated and otherwise ignored.  There
  are no ``/data/`` routes.
* No name_resolve registration: ``--name-resolve-type``, ``--nfs-record-root`` and ``--etcd3-addr``
  are accepted and reported by ``/health``, which also carries fields AReaL's does not (role,
  index, host, port, forked children, configuration).
* Stricter validation where AReaL does not validate at all: /fork's and /kill_forked_worker's
  ``role`` and ``worker_index`` must be JSON scalars and ``raw_cmd`` a list, else 400 (AReaL runs
  a string's characters as a command, and fails with a 500 on other non-lists and on unhashable keys).
* Pydantic's wording of AReaL's 400s for /create_engine and /call fields is not copied.
* Connections are kept alive (HTTP/1.1); werkzeug closes every connection after its reply.
  Unknown routes and wrong methods answer 404/405 with a JSON body, werkzeug's are HTML.
* Without a passwd entry for the uid, logs go under the numeric uid (AReaL fails the fork).

Modules: ``protocol`` (errors and request bodies), ``ports`` (addresses and /alloc_ports), ``forks``
(/fork's children), ``engine_host`` (engines and the thread that runs them), ``routes`` (the guard's
state and one handler per route), ``server`` (HTTP), ``cli`` (command line and lifecycle).
"""
