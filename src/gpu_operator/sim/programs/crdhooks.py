"""``gpu-operator crds apply|delete`` as a simulator program: the Helm chart's CRD hook Jobs.

The charts' pre-upgrade hook Jobs (``operator.upgradeCRD``; the network chart's ``upgradeCRDs``) run
``gpu-operator crds apply`` and their pre-delete hook Jobs (``cleanupCRD``, ``cleanupCRDs``) run
``gpu-operator crds delete`` in the operator image; the network chart's pass ``--operator=network``.
When such a Job's pod is bound to a simulated node, the simulated kubelet runs
:func:`~gpu_operator.kube.crds.run_crd_action` -- what the command runs -- in-process, with the pod's own
service-account credentials, so the hook's ClusterRole is what authorizes it. It blocks (it waits for
the API server), so it runs in a thread of its own; how it ends becomes the container's exit status,
which the Job controller reads.
"""

from __future__ import annotations

from gpu_operator.api.crdsets import GPU, OPERATORS
from gpu_operator.kube.connect import sync_client
from gpu_operator.kube.crds import FIELD_MANAGER, run_crd_action
from gpu_operator.sim.programs.context import ProgramContext, ProgramExit
from gpu_operator.sim.programs.operatorpod import USAGE_EXIT_CODE, in_cluster_config

PROGRAM = "crds"
ACTIONS = ("apply", "delete")
DEFAULT_TIMEOUT = 120.0


def parse_args(argv: list[str]) -> tuple[str, float, str]:
    """``ACTION [--timeout S] [--operator gpu|network]`` (either ``--x=V`` or ``--x V``), as ``gpu-operator
    crds`` takes them: (action, timeout, operator); else a usage error (2)."""
    rest = list(argv)
    if not rest or rest[0] not in ACTIONS:
        raise ProgramExit(USAGE_EXIT_CODE, f"Error: expected one of {', '.join(ACTIONS)}, got {rest[:1]}")
    action, options = rest.pop(0), {"--timeout": str(DEFAULT_TIMEOUT), "--operator": GPU}
    while rest:
        name, has_value, value = rest.pop(0).partition("=")
        if name not in options:
            raise ProgramExit(USAGE_EXIT_CODE, f"Error: No such option: {name}")
        if not has_value:
            if not rest:
                raise ProgramExit(USAGE_EXIT_CODE, f"Error: Option '{name}' requires an argument.")
            value = rest.pop(0)
        options[name] = value
    if options["--operator"] not in OPERATORS:
        raise ProgramExit(USAGE_EXIT_CODE, f"Error: --operator must be one of {', '.join(OPERATORS)}")
    return action, float(options["--timeout"]), options["--operator"]


def crds_program(ctx: ProgramContext) -> None:
    """Run ``gpu-operator crds ACTION`` as the pod's service account; a failure is exit 1 with its reason."""
    action, timeout, operator = parse_args(list(ctx.argv))
    client = sync_client(config=in_cluster_config(ctx), field_manager=FIELD_MANAGER)
    try:
        for line in run_crd_action(client=client, action=action, timeout=timeout, operator=operator):
            ctx.log.info("%s/%s: %s", ctx.namespace, ctx.pod_name, line)
    except Exception as error:
        raise ProgramExit(1, f"error: gpu-operator crds {action}: {type(error).__name__}: {error}") from error
    finally:
        client.close()
