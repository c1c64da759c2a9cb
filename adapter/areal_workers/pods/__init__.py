"""A release's pods as the cluster shows them: the watch that waits for them, the inspector that reads their events,
logs, nodes and topology, Kueue's admission of them, and the workers AReaL holds in them."""
