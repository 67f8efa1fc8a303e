#!/usr/bin/python3.11 -I
"""The image's ``gpu-operator`` command (installed as /usr/local/bin/gpu-operator): the CLI on Debian's
Python 3.11, for the operator and every node agent.

``-I`` (isolated mode): no ``PYTHON*`` variables, no user site directory and no script directory on
``sys.path``, so nothing in a pod's environment changes which code runs. The packages are found through
/usr/local/lib/python3.11/dist-packages/gpu-operator.pth, which adds /opt/gpu-operator/site-packages.
"""

from gpu_operator.cli.main import main

if __name__ == "__main__":
    main()
