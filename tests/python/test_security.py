"""echo_torch's PlannerClient against an echod that requires mutual TLS and a
bearer token: the certificate and token come from arguments or ECHO_TORCH_*
variables; without them echod refuses the call."""
import os
import subprocess
import tempfile
import unittest
from unittest import mock

import grpc
from google.protobuf import text_format

import servers
from echo_torch import PlannerClient, PlanningError, ServerUnavailable, proto

MAKE_CERTS = os.path.join(servers.REPO, "tests", "integration", "make_test_certs.sh")
TOKEN = "torch-token-0123456789abcdef"
GRAPH = """
tensors { id: "x" size_bytes: 1024 }
ops { id: "relu" input_ids: "x" output_ids: "y" }
tensors { id: "y" size_bytes: 1024 }
"""
_ENV = ("ECHO_TORCH_TLS_CA_FILE", "ECHO_TORCH_TLS_CERT_FILE", "ECHO_TORCH_TLS_KEY_FILE",
        "ECHO_TORCH_TOKEN", "ECHO_TORCH_TOKEN_FILE")


def estimate_request():
    request = proto.planner_pb2.EstimateMemoryRequest()
    text_format.Parse(GRAPH, request.graph)
    return request


@unittest.skipIf(servers.echod_path() is None, "echod is not built")
class SecureEchodTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dir = cls.tmp.name
        subprocess.run(["bash", MAKE_CERTS, cls.dir], check=True)
        tokens = cls.file("tokens")
        with open(tokens, "w") as f:
            f.write(f"trainer {TOKEN}\n")
        os.chmod(tokens, 0o600)
        with open(cls.file("ca.crt"), "rb") as ca, open(cls.file("trainer.key"), "rb") as key, \
                open(cls.file("trainer.crt"), "rb") as cert:
            ready = grpc.ssl_channel_credentials(ca.read(), key.read(), cert.read())
        cls.echod = servers.Echod(
            extra_args=[f"--tls_cert_file={cls.file('server.crt')}",
                        f"--tls_key_file={cls.file('server.key')}",
                        f"--tls_client_ca_file={cls.file('ca.crt')}",
                        f"--auth_token_file={tokens}"],
            channel_credentials=ready)
        cls.echod.__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.echod.__exit__(None, None, None)
        cls.tmp.cleanup()

    @classmethod
    def file(cls, name):
        return os.path.join(cls.dir, name)

    def setUp(self):
        patcher = mock.patch.dict(os.environ)
        patcher.start()
        self.addCleanup(patcher.stop)
        for name in _ENV:
            os.environ.pop(name, None)

    def client(self, **kwargs):
        client = PlannerClient(self.echod.address, timeout_seconds=10, **kwargs)
        self.addCleanup(client.close)
        return client

    def test_certificate_and_token_as_arguments(self):
        client = self.client(tls_ca_file=self.file("ca.crt"),
                             tls_cert_file=self.file("trainer.crt"),
                             tls_key_file=self.file("trainer.key"), token=TOKEN)
        client.wait_ready()
        self.assertEqual(client.estimate_memory(estimate_request()).op_count, 1)

    def test_certificate_and_token_from_the_environment(self):
        os.environ.update(ECHO_TORCH_TLS_CA_FILE=self.file("ca.crt"),
                          ECHO_TORCH_TLS_CERT_FILE=self.file("trainer.crt"),
                          ECHO_TORCH_TLS_KEY_FILE=self.file("trainer.key"))
        token_file = self.file("torch.token")
        with open(token_file, "w") as f:
            f.write(TOKEN + "\n")
        os.environ["ECHO_TORCH_TOKEN_FILE"] = token_file
        self.assertEqual(self.client().estimate_memory(estimate_request()).op_count, 1)

    def test_missing_or_wrong_token_is_unauthenticated(self):
        tls = dict(tls_ca_file=self.file("ca.crt"), tls_cert_file=self.file("trainer.crt"),
                   tls_key_file=self.file("trainer.key"))
        for token in (None, "wrong-token-0123456789abcdef"):
            with self.assertRaises(PlanningError) as caught:
                self.client(token=token, **tls).estimate_memory(estimate_request())
            self.assertEqual(caught.exception.code, grpc.StatusCode.UNAUTHENTICATED)
            self.assertIn("EstimateMemory", str(caught.exception))

    def test_without_a_client_certificate_the_handshake_fails(self):
        client = self.client(tls_ca_file=self.file("ca.crt"), token=TOKEN)
        with self.assertRaises(ServerUnavailable):
            client.estimate_memory(estimate_request())
        plaintext = self.client(token=TOKEN)
        with self.assertRaises(ServerUnavailable):
            plaintext.estimate_memory(estimate_request())

    def test_inconsistent_files_are_refused_with_a_message(self):
        with self.assertRaisesRegex(ValueError, "go together"):
            self.client(tls_ca_file=self.file("ca.crt"), tls_cert_file=self.file("trainer.crt"))
        with self.assertRaisesRegex(ValueError, "needs tls_ca_file"):
            self.client(tls_cert_file=self.file("trainer.crt"),
                        tls_key_file=self.file("trainer.key"))
        with self.assertRaisesRegex(ValueError, "cannot read tls_ca_file"):
            self.client(tls_ca_file=self.file("missing.crt"))


if __name__ == "__main__":
    unittest.main()
