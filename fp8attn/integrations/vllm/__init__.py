"""vLLM (V1 engine) attention backend of fp8attn: the classes are in :mod:`fp8attn.integrations.vllm.backend`
(which imports vLLM); the plugin vLLM loads, which registers them, is :mod:`fp8attn_vllm`."""
