"""The real engine behind its gRPC server, driven in real time: one server per policy
(`grpc_run`), two replicas behind the router per placement (`router_run`, with `grpc_run`'s
client)."""
