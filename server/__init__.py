"""gRPC server, client library and router (wire contract in DESIGN.md); built by the gRPC issue."""
