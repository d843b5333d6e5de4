"""fp8attn's vLLM plugin: puts the FP8ATTN attention backend in vLLM's ``CUSTOM`` slot.

vLLM runs :func:`register` (the ``fp8attn`` entry point of the ``vllm.general_plugins`` group) once in
every process it starts: the API server or ``LLM`` process, the engine core, each worker. Select the
backend with ``--attention-backend CUSTOM`` (``LLM(..., attention_backend="CUSTOM")``). ``CUSTOM`` is a
member vLLM defines, so the selection survives the pickling of the engine config into spawned engine
processes, which unpickle it before they load plugins (a name registered at run time does not).

This package is separate from :mod:`fp8attn` so that loading the plugin loads neither fp8attn's compiled
extension nor its backend classes (the API server needs neither); the classes live in
:mod:`fp8attn.integrations.vllm.backend`, imported by vLLM only where the backend is selected.

vLLM's CPU platform always runs its own ``CPU_ATTN`` backend, whatever was selected. With fp8attn's
plugin loaded, a selection of FP8ATTN on the CPU platform is never ignored: it runs FP8ATTN (fp8attn's C++
CPU implementation) when the environment sets ``FP8ATTN_VLLM_CPU=1`` and is refused with an error
otherwise; every other selection goes to vLLM's CPU platform unchanged.
"""

from __future__ import annotations

import logging
import os

__all__ = ["BACKEND_CLASS_PATH", "BACKEND_NAME", "CPU_OPT_IN", "cpu_configuration_problems", "register"]

#: the name fp8attn's log lines and error messages use for the backend
BACKEND_NAME = "FP8ATTN"
BACKEND_CLASS_PATH = "fp8attn.integrations.vllm.backend.FP8AttnBackend"
#: the environment variable that lets FP8ATTN run on vLLM's CPU platform
CPU_OPT_IN = "FP8ATTN_VLLM_CPU"

logger = logging.getLogger("vllm.fp8attn")


def register() -> None:
    """Register FP8ATTN as vLLM's ``CUSTOM`` attention backend (idempotent), and on vLLM's CPU platform
    make a selection of it run FP8ATTN (with ``FP8ATTN_VLLM_CPU=1``) or fail, never fall back.

    A ``CUSTOM`` slot already registered by another package is left to it, with a warning.
    """
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    custom = AttentionBackendEnum.CUSTOM
    if custom.is_overridden() and custom.get_path() != BACKEND_CLASS_PATH:
        logger.warning("vLLM's CUSTOM attention backend is already registered to %s: %s is not registered",
                       custom.get_path(), BACKEND_NAME)
        return
    register_backend(custom, BACKEND_CLASS_PATH)
    _route_cpu_selection()


def selects_fp8attn(backend: object) -> bool:
    """True if ``backend`` (an ``AttentionBackendEnum`` member or None) resolves to FP8ATTN."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    return backend is AttentionBackendEnum.CUSTOM and backend.is_overridden() and \
        backend.get_path() == BACKEND_CLASS_PATH


def _route_cpu_selection() -> None:
    """Wrap the CPU platform's backend selection (``get_attn_backend_cls``), which returns ``CPU_ATTN``
    whatever was selected, so that a selection of FP8ATTN is honoured or refused (see the module doc)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    platform_cls = type(current_platform)
    if getattr(platform_cls.get_attn_backend_cls, "_fp8attn_route", False):
        return
    vllm_select = platform_cls.get_attn_backend_cls  # bound to the platform class

    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None):
        return _select_on_cpu(vllm_select, selected_backend, attn_selector_config, num_heads)

    get_attn_backend_cls._fp8attn_route = True
    get_attn_backend_cls.__doc__ = vllm_select.__doc__
    platform_cls.get_attn_backend_cls = classmethod(get_attn_backend_cls)


# validate_configuration's reason for a device capability the backend refuses (vLLM 0.32 and 0.33)
_CAPABILITY_REASON = "compute capability not supported"


def cpu_configuration_problems(backend_cls: type, attn_selector_config) -> list[str]:
    """``backend_cls.validate_configuration``'s reasons for a layer on vLLM's CPU platform, where fp8attn runs
    its C++ CPU implementation and no compute capability applies (the platform reports None)."""
    reasons = backend_cls.validate_configuration(device_capability=None, **attn_selector_config._asdict())
    return [r for r in reasons if r != _CAPABILITY_REASON]


def _select_on_cpu(vllm_select, selected_backend, attn_selector_config, num_heads) -> str:
    opted_in = os.environ.get(CPU_OPT_IN, "") == "1"
    if not selects_fp8attn(selected_backend):
        if opted_in:
            logger.warning("%s=1 has no effect: the selected attention backend is %s, not %s "
                           "(--attention-backend CUSTOM); vLLM's CPU platform chooses its own",
                           CPU_OPT_IN, selected_backend, BACKEND_NAME)
        return vllm_select(selected_backend, attn_selector_config, num_heads)
    if not opted_in:
        raise ValueError(
            f"{BACKEND_NAME} was selected (--attention-backend CUSTOM) on vLLM's CPU platform, which runs only "
            f"its own CPU_ATTN backend. Set {CPU_OPT_IN}=1 to run {BACKEND_NAME} there (fp8attn's C++ CPU "
            f"implementation), or drop the selection to run CPU_ATTN.")
    reasons = cpu_configuration_problems(selected_backend.get_class(), attn_selector_config)
    if reasons:
        raise ValueError(f"{BACKEND_NAME} cannot run this attention layer on vLLM's CPU platform: {reasons}")
    logger.info("Using %s on vLLM's CPU platform (%s=1): fp8attn's C++ CPU implementation",
                BACKEND_NAME, CPU_OPT_IN)
    return BACKEND_CLASS_PATH
