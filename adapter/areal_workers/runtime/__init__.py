"""What a scheduler runs on: its collaborators (built by one factory), the asyncio loop helm runs on, the trainer's
heartbeat Lease and the reaping of releases whose trainer died."""
