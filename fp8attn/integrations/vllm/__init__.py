"""vLLM (V1 engine) attention backend for fp8attn.

Importing this package does not import vLLM. vLLM's plugin loader calls :func:`register` (declared as the
``fp8attn`` entry point in the ``vllm.general_plugins`` group), which registers the backend under the
name ``FP8ATTN``; select it with ``--attention-backend FP8ATTN`` or
``LLM(..., attention_config={"backend": "FP8ATTN"})``. The classes live in
:mod:`fp8attn.integrations.vllm.backend`, which imports vLLM.
"""

BACKEND_NAME = "FP8ATTN"
BACKEND_CLASS_PATH = "fp8attn.integrations.vllm.backend.FP8AttnBackend"

__all__ = ["BACKEND_CLASS_PATH", "BACKEND_NAME", "register"]


def register() -> None:
    """Register the FP8ATTN attention backend with vLLM (idempotent).

    vLLM runs general plugins once per process (engine core, workers, the API process); a process that
    calls this twice, or whose plugin loader already did, keeps the first registration.
    """
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    if BACKEND_NAME in AttentionBackendEnum.__members__:
        member = AttentionBackendEnum[BACKEND_NAME]
        if member.get_path() != BACKEND_CLASS_PATH:
            register_backend(member, BACKEND_CLASS_PATH)
        return
    register_backend(BACKEND_NAME, BACKEND_CLASS_PATH)
