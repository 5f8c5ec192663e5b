"""moto's S3 in server mode on 127.0.0.1, for the tests of ``s3://`` sources.

``MotoS3(verify=True)`` starts ``python -m moto.server`` with
``INITIAL_NO_AUTH_ACTION_COUNT=3``: moto serves three requests unchecked
(creating an IAM user, its access key and an allow-all policy), then checks
every request's SigV4 signature against that key, answering
``SignatureDoesNotMatch`` to a wrong one. ``MotoS3(verify=False)`` checks no
signature, and serves anonymous requests on a bucket whose policy allows them.
``client()`` is a boto3 client (boto3 is a test-only dependency) with the
server's key; ``env()`` the ``AWS_*`` variables a ``dtune`` child signs with.

The server runs in a session of its own, its output in a file of a private
``dtune-test-moto-*`` directory; ``stop()`` ends the session and removes the
directory. ``Unavailable`` says why moto cannot run here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Self

from dtune_lab.procgroup import stop_group

from support.realservers import Unavailable, free_port

REGION = "us-east-1"


def public_read_policy(bucket: str) -> str:
    """A bucket policy letting anyone (anonymous requests too) read its objects."""
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject", "s3:ListBucket"],
         "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]}]})


class MotoS3:
    def __init__(self, *, verify: bool) -> None:
        self.verify = verify
        self.port = 0
        self.key = "dtune-test-key"
        self.secret = "dtune-test-secret"
        self._proc: subprocess.Popen[bytes] | None = None
        self._work: str | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        for module in ("moto", "boto3", "flask", "werkzeug"):
            if importlib.util.find_spec(module) is None:
                raise Unavailable(f"moto's server needs {module} (pip install 'moto[server]' boto3)")
        self._work = tempfile.mkdtemp(prefix="dtune-test-moto-")
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ACCESS_KEY_ID="bootstrap", AWS_SECRET_ACCESS_KEY="bootstrap", AWS_DEFAULT_REGION=REGION)
        if self.verify:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "3"
        log = open(os.path.join(self._work, "moto.log"), "wb")  # noqa: SIM115 -- the child holds it
        try:
            self._proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                           "-p", str(self.port)], stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        finally:
            log.close()
        try:
            self._wait_listening(20.0)
            if self.verify:
                self._make_user()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_listening(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise Unavailable(f"moto server exited with {self._proc.returncode}: {self.log()[-500:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return  # a bare connect: it uses none of the unauthenticated actions
            except OSError:
                time.sleep(0.1)
        raise Unavailable(f"moto server not listening on port {self.port} after {seconds:g} s")

    def _make_user(self) -> None:
        """The IAM user whose key moto then checks signatures against (the three free actions)."""
        import boto3

        iam = boto3.client("iam", endpoint_url=self.endpoint, region_name=REGION,
                           aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
        iam.create_user(UserName="dtune")
        key = iam.create_access_key(UserName="dtune")["AccessKey"]
        iam.put_user_policy(UserName="dtune", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        self.key, self.secret = key["AccessKeyId"], key["SecretAccessKey"]

    def client(self, **config: Any):
        """A boto3 S3 client for this server (path-style, SigV4 unless ``config`` says otherwise)."""
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=self.key, aws_secret_access_key=self.secret,
                            config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, **config))

    def env(self, **extra: str) -> dict[str, str]:
        """``AWS_*`` variables for a child that signs with this server's key."""
        return {"AWS_ACCESS_KEY_ID": self.key, "AWS_SECRET_ACCESS_KEY": self.secret,
                "AWS_REGION": REGION, **extra}

    def log(self) -> str:
        if self._work is None:
            return ""
        try:
            with open(os.path.join(self._work, "moto.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self) -> None:
        if self._proc is not None:
            stop_group(self._proc)
            self._proc = None
        if self._work is not None:
            shutil.rmtree(self._work, ignore_errors=True)
            self._work = None


def moto_serving(verify: bool):
    """A generator for a fixture: a started ``MotoS3`` (the test skipped where moto cannot run),
    stopped at the end."""
    server = MotoS3(verify=verify)
    try:
        server.start()
    except Unavailable as exc:
        import pytest  # (only where a fixture runs this)
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()
