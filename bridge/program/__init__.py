"""What every bridge program needs, written once: flags with environment variables, the manager with
leader election, probes and metrics, the live WorkloadMixing configuration and the counts board, and
the scaffolding of ``explain``. A bridge is a translator, a reconciler and a short program on top.

- :class:`BridgeProgram` (subclass it, implement ``wire``), :class:`Shell`, :class:`Wiring`,
  :func:`run_until_stopped`;
- :class:`ProgramSettings` and the flag helpers of :mod:`.settings`;
- :class:`LiveMixing`, :class:`DirectPublisher`;
- :func:`run_explain`, :class:`ExplainContext`, :func:`workload_lines`.
"""

from .explain import (
    EXIT_ERROR,
    EXIT_NOT_SERVABLE,
    EXIT_SERVABLE,
    ExplainContext,
    load_mixing_file,
    run_explain,
    workload_lines,
)
from .live import DirectPublisher, LiveMixing
from .settings import (
    ENV_PREFIX,
    ProgramSettings,
    add_common_flags,
    add_run_flags,
    bind_address,
    check_common,
    common_settings,
    configure_program_logging,
    default_namespace,
    env,
    env_bool,
    flag_help,
    program_name,
)
from .shell import BridgeProgram, Shell, Wiring, run_until_stopped

__all__ = [
    "ENV_PREFIX",
    "EXIT_ERROR",
    "EXIT_NOT_SERVABLE",
    "EXIT_SERVABLE",
    "BridgeProgram",
    "DirectPublisher",
    "ExplainContext",
    "LiveMixing",
    "ProgramSettings",
    "Shell",
    "Wiring",
    "add_common_flags",
    "add_run_flags",
    "bind_address",
    "check_common",
    "common_settings",
    "configure_program_logging",
    "default_namespace",
    "env",
    "env_bool",
    "flag_help",
    "load_mixing_file",
    "program_name",
    "run_explain",
    "run_until_stopped",
    "workload_lines",
]
