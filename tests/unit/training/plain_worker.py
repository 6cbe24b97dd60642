"""A worker for the launcher's own tests: plain Python, no TensorFlow, so each runs in well under a second.

    python tests/unit/training/plain_worker.py ROLE [ARGS...]   (started by `mgtutor.training.cluster.launch`)

ROLE is what the test needs from each worker:
- ``echo``: print TF-style start-up chatter, Keras's epoch lines and a greeting, report what it was given;
- ``fail_once_0_has_a_child``: worker 0 starts a grandchild and writes its pid to ARGS[0];
  worker 1 waits for that file, then exits 3;
- ``sleep``: print, then sleep a minute (to be timed out or killed);
- ``announce_then_sleep``: worker 0 prints a checkpoint line, then every worker sleeps;
- ``cores``: report the cores this worker may run on and its thread-pool variables (pinning);
- ``loopback_pair``: worker 0 listens on its ``TF_CONFIG`` port on every interface (as TensorFlow
  does), worker 1 connects to it through ``localhost`` and says hello; each reports its network
  namespace and interfaces.
"""

import json
import os
import socket
import subprocess
import sys
import time

from mgtutor.support.processes import report_result

INDEX = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
role, args = sys.argv[1], sys.argv[2:]

if role == "echo":
    print("I0000 00:00:1795328799.588791     479 cudart_stub.cc:31] Could not find cuda drivers")
    print("Epoch 1/2")
    print("78/78 - 9s - 110ms/step - accuracy: 0.2324 - loss: 2.0418")  # Keras's fit(verbose=2)
    print(f"hello from {INDEX}")
    report_result({"index": INDEX, "tf_config": json.loads(os.environ["TF_CONFIG"]),
                   "args": args, "extra": os.environ["EXTRA"]})  # fmt: skip
elif role == "fail_once_0_has_a_child":
    marker = args[0]
    if INDEX == 1:
        while not os.path.exists(marker):  # fail once worker 0 has a child of its own
            time.sleep(0.01)
        print("worker 1 gives up", flush=True)
        sys.exit(3)
    child = subprocess.Popen(["sleep", "60"])  # a grandchild: the process-group kill must reach it
    with open(marker + ".tmp", "w") as handle:
        handle.write(str(child.pid))
    os.replace(marker + ".tmp", marker)
    time.sleep(60)
elif role == "sleep":
    print("working", flush=True)
    time.sleep(60)
elif role == "announce_then_sleep":
    if INDEX == 0:
        print("checkpoint saved: step 4", flush=True)
    time.sleep(60)
elif role == "cores":
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    pools = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")
    report_result({"cores": cores, "threads": {name: os.environ.get(name) for name in pools}})
elif role == "loopback_pair":
    addresses = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]
    ports = [int(address.rsplit(":", 1)[1]) for address in addresses]
    port = ports[0]
    received = None
    if INDEX == 0:
        with socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True) as server:
            connection, _ = server.accept()
            with connection:
                received = connection.recv(64).decode()
    else:
        for _ in range(500):  # worker 0 may not listen yet
            try:
                with socket.create_connection(("localhost", port), timeout=5) as client:
                    client.sendall(f"hello from worker {INDEX}".encode())
                break
            except ConnectionRefusedError:
                time.sleep(0.01)
    report_result({"netns": os.readlink("/proc/self/ns/net"), "received": received, "ports": ports,
                   "interfaces": sorted(name for _, name in socket.if_nameindex())})  # fmt: skip
else:
    sys.exit(f"plain_worker.py: unknown role {role!r}")
