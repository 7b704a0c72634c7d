"""Default bounds on what one request may carry (torch-free, for the command line)."""

DEFAULT_MAX_PROMPT_BYTES = 1 << 20  # 1 MiB of text: far past any context this engine serves
DEFAULT_DNS_REFRESH_SECONDS = 5.0  # how often a router re-resolves its --replicas-dns names
MESSAGE_OVERHEAD_BYTES = 1 << 20  # a gRPC message's bound: twice the prompt bound plus this
DEFAULT_RESPONSES_PER_TENANT = 1000  # stored Responses per tenant (server/response_store.py)
DEFAULT_RESPONSES_MAX_BYTES = 256 << 20  # stored Responses in all, as JSON
