"""The workers' guard HTTP API (AReaL's rpc_server): the client and its transport, what its replies mean, the wire
format of values and the process forks started through it."""
