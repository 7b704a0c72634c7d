"""Native CPU kernels: C built on first use for this CPU (`build`), each behind a Python entry
point with the same contract as its torch reference, which it replaces on the CPU when the
library and the tensors allow (`agentix_kernels` dispatches)."""
