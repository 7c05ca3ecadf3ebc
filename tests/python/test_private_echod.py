"""echo_torch's private echod (echo_torch.local_server): started when no server
is given and none answers at the default address, on a Unix socket in a
private directory, stopped with its process. The default address is pointed
at a port nobody listens on, and $ECHO_TORCH_ECHOD at the build's echod."""
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
import unittest
from unittest import mock

import torch

import harness
import servers
from echo_torch import client as client_lib
from echo_torch import local_server, optimize, report
from test_executor import Mlp

ECHOD = servers.echod_path()


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's reaper may be slow, or absent in a
    container)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@unittest.skipIf(ECHOD is None, "echod is not built (cmake --build build)")
class PrivateEchodTest(unittest.TestCase):
    def setUp(self):
        dead = f"127.0.0.1:{servers.free_port()}"
        env = {k: v for k, v in os.environ.items()
               if k not in ("ECHO_SERVER", "ECHO_TORCH_PRIVATE_ECHOD")}
        env["ECHO_TORCH_ECHOD"] = ECHOD
        patches = [mock.patch.dict(os.environ, env, clear=True),
                   mock.patch.object(client_lib, "DEFAULT_SERVER", dead)]
        for patch in patches:
            patch.start()
            self.addCleanup(patch.stop)
        self.addCleanup(local_server.stop_private_server)

    def test_optimize_without_a_server_plans_on_a_private_echod(self):
        torch.manual_seed(0)
        model = Mlp(width=64, depth=3)
        inputs = (torch.randn(32, 64),)
        with self.assertLogs("echo_torch", "INFO") as logs:
            wrapped = optimize(model, on_error="raise", plan_cache=False)
        started = [line for line in logs.output if "private" in line]
        self.assertEqual(len(started), 1, logs.output)
        self.assertIn("stopped when it exits", started[0])
        server = local_server._server
        self.assertIsNotNone(server)
        self.assertIn(server.address, started[0])
        # The directory is the process's own, the socket inside it.
        mode = stat.S_IMODE(os.stat(server.directory).st_mode)
        self.assertEqual(mode, 0o700)
        self.assertTrue(stat.S_ISSOCK(os.stat(server.socket).st_mode))
        eager = harness.eager(model, inputs)
        planned = harness.run_step(model, wrapped, inputs)
        self.assertIsNone(wrapped.fallback_reason)
        rep = report(wrapped)
        self.assertEqual(rep.source, "echod:RECOMPUTE_POLICY_AUTO")
        self.assertLess(harness.max_grad_diff(planned, eager), 1e-6)
        # A second model reuses the same echod.
        optimize(Mlp(width=16, depth=1), on_error="raise", plan_cache=False)
        self.assertIs(local_server._server, server)
        process, directory = server.process, server.directory
        local_server.stop_private_server()
        self.assertIsNotNone(process.poll())
        self.assertFalse(os.path.exists(directory))

    def test_given_server_or_opt_out_never_starts_one(self):
        address = f"127.0.0.1:{servers.free_port()}"
        self.assertEqual(client_lib.connect(address).address, address)
        with mock.patch.dict(os.environ, {"ECHO_TORCH_PRIVATE_ECHOD": "0"}):
            self.assertEqual(client_lib.connect().address, client_lib.DEFAULT_SERVER)
        self.assertIsNone(local_server._server)

    def test_an_echod_that_does_not_start_falls_back_naming_why(self):
        with mock.patch.dict(os.environ, {"ECHO_TORCH_ECHOD": "/bin/false"}):
            with self.assertLogs("echo_torch", "WARNING") as logs:
                connected = client_lib.connect(timeout_seconds=0.5)
        self.assertEqual(connected.address, client_lib.DEFAULT_SERVER)
        self.assertIn("exited with code 1 at start", "\n".join(logs.output))
        model = Mlp(width=16, depth=1)
        with mock.patch.dict(os.environ, {"ECHO_TORCH_ECHOD": "/bin/false"}):
            wrapped = optimize(model, timeout_seconds=0.5, plan_cache=False)
        with self.assertWarnsRegex(RuntimeWarning, "not reachable"):
            wrapped(torch.randn(4, 16)).sum().backward()
        self.assertIsNotNone(wrapped.fallback_reason)

    def test_echod_dies_with_a_killed_process(self):
        script = textwrap.dedent(f"""
            import sys
            from echo_torch import client, local_server
            client.DEFAULT_SERVER = {client_lib.DEFAULT_SERVER!r}
            client.connect()
            print(local_server._server.process.pid, local_server._server.directory, flush=True)
            sys.stdin.read()
        """)
        child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        pid, _directory = child.stdout.readline().split()
        pid = int(pid)
        os.kill(pid, 0)  # running
        child.send_signal(signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if not _running(pid):
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            self.fail(f"the private echod {pid} outlived its killed process")


if __name__ == "__main__":
    unittest.main()
