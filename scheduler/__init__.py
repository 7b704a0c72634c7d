"""Program-level scheduling: process table, policies, discretized queues, batch formation (no torch)."""
