"""Who may talk to the server, probed as an attacker would: every door without credentials, with the
wrong ones, under a foreign name (DNS rebinding, from a real Chromium), from another site's page;
and signing in as a user does, in the same browser."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from trainmon import access_keys
from trainmon.server import auth

from .conftest import PY, ServerProcess, signed_post, start_server, wait_for

CHROMIUM = os.environ.get("TRAINMON_TEST_CHROMIUM", "/usr/bin/chromium")
REBOUND = "rebound.example"  # an attacker's name, which the browser is made to resolve to 127.0.0.1


def _job(name: str, marker: Path) -> dict[str, Any]:
    """A job whose command leaves ``marker``: if it exists, a command ran."""
    return {"TrainingJobName": name, "AlgorithmSpecification": {
        "TrainingInputMode": "File", "ContainerEntrypoint": [PY, "-c", f"open({str(marker)!r}, 'w')"]}}


def _jobs(server: ServerProcess) -> list[str]:
    answer = httpx.get(server.url + "/api/jobs", headers=server.headers, timeout=60)
    assert answer.status_code == 200
    return [job["TrainingJobName"] for job in answer.json()["TrainingJobSummaries"]]


# -- every door needs credentials, on loopback too ----------------------------------------------------


def test_every_native_door_needs_credentials_on_loopback(server: ServerProcess, tmp_path: Path) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for path in ("/api/jobs", "/api/events", "/metrics", "/api/openapi.json", "/static/console.js",
                     "/api/jobs/x/logs?after=[]"):
            refused = client.get(path)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "Unauthorized", path
            assert "server-token" in refused.json()["error"]["message"]
        for page in ("/", "/jobs/x", "/new", "/alarms"):
            assert client.get(page).headers.get("location") == "/login", page  # a page sends the visitor to sign in
        created = client.post("/api/jobs", json=_job("no-credentials", tmp_path / "ran"))
        assert created.status_code == 401
        operation = client.post("/api/sagemaker/CreateTrainingJob", json=_job("no-credentials", tmp_path / "ran"))
        assert operation.status_code == 401
        for wrong in ({"Authorization": "Bearer not-the-token-at-all"}, {"Cookie": f"{auth.cookie_name(0)}=1.x"},
                      {"Cookie": f"{auth.cookie_name(int(server.url.rsplit(':', 1)[1]))}=99999999999.forged"}):
            assert client.get("/api/jobs", headers=wrong).status_code == 401, wrong
        assert client.get("/api/jobs", params={"token": server.token}).status_code == 401  # never in a URL
        assert client.get("/api/jobs", headers=server.headers).status_code == 200
    assert _jobs(server) == [] and not (tmp_path / "ran").exists()


def test_the_aws_doors_need_a_signature_by_an_issued_key(server: ServerProcess, tmp_path: Path) -> None:
    """Unsigned, or signed by a key the server never issued: refused as AWS refuses, and nothing runs,
    though the token file exists (it guards the native doors, not these)."""
    create = json.dumps(_job("unsigned", tmp_path / "ran")).encode()
    json_headers = {"X-Amz-Target": "SageMaker.CreateTrainingJob", "Content-Type": "application/x-amz-json-1.1"}
    unsigned = httpx.post(server.url + "/", content=create, headers=json_headers, timeout=60)
    assert unsigned.status_code == 403 and unsigned.json()["__type"] == "MissingAuthenticationTokenException"
    logs = httpx.post(server.url + "/", content=b'{"logGroupName": "/aws/sagemaker/TrainingJobs", '
                      b'"logStreamName": "x/algo-1-0"}', headers={"X-Amz-Target": "Logs_20140328.GetLogEvents",
                                                                    "Content-Type": "application/x-amz-json-1.1"})
    assert logs.status_code == 403
    bearer = httpx.post(server.url + "/", content=create, headers={**json_headers, **server.headers}, timeout=60)
    assert bearer.status_code == 403  # the token is not an AWS credential
    cbor = httpx.post(server.url + "/service/GraniteServiceVersion20100801/operation/ListMetrics", content=b"\xa0",
                      headers={"smithy-protocol": "rpc-v2-cbor", "Content-Type": "application/cbor"}, timeout=60)
    assert cbor.status_code == 403
    query = httpx.post(server.url + "/", data={"Action": "GetCallerIdentity", "Version": "2011-06-15"}, timeout=60)
    assert query.status_code == 403 and b"MissingAuthenticationToken" in query.content

    import botocore.auth
    import botocore.awsrequest
    import botocore.credentials

    request = botocore.awsrequest.AWSRequest("POST", server.url + "/", data=create, headers=json_headers)
    botocore.auth.SigV4Auth(botocore.credentials.Credentials("AKIAFORGED0000000000", "secret"), "sagemaker",
                            "us-east-1").add_auth(request)
    forged = httpx.post(server.url + "/", content=create, headers=dict(request.headers.items()), timeout=60)
    assert forged.status_code == 403 and forged.json()["__type"] == "UnrecognizedClientException"
    assert _jobs(server) == [] and not (tmp_path / "ran").exists()
    good = signed_post(server, "sagemaker", b"{}", {**json_headers, "X-Amz-Target": "SageMaker.ListTrainingJobs"})
    assert good.status_code == 200 and good.json()["TrainingJobSummaries"] == []


def test_issued_keys_do_not_open_the_native_doors(home: Path, tmp_path: Path) -> None:
    key = access_keys.create(home, "tests")
    started = start_server(home)
    try:
        for headers in ({}, {"Authorization": f"Bearer {key.SecretAccessKey}"}):
            answer = httpx.post(started.url + "/api/sagemaker/CreateTrainingJob", headers=headers, timeout=60,
                                json=_job("keyed", tmp_path / "ran"))
            assert answer.status_code == 401
        assert _jobs(started) == [] and not (tmp_path / "ran").exists()
    finally:
        started.stop()


# -- the names a server answers to ---------------------------------------------------------------------


def test_a_foreign_host_reaches_no_door(server: ServerProcess) -> None:
    port = server.url.rsplit(":", 1)[1]
    for host in (f"{REBOUND}:{port}", REBOUND, f"localhost.{REBOUND}:{port}", ""):
        for method, path in (("GET", "/api/jobs"), ("GET", "/login"), ("POST", "/login"), ("POST", "/")):
            answer = httpx.request(method, server.url + path, headers={"Host": host, **server.headers}, timeout=60)
            assert answer.status_code == 421 and answer.json()["error"]["code"] == "MisdirectedRequest", (host, path)
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"LOCALHOST.:{port}"):
        assert httpx.get(server.url + "/api/jobs", headers={"Host": host, **server.headers}).status_code == 200, host


def test_allow_host_adds_a_name(home: Path) -> None:
    started = start_server(home, "--allow-host", "trainmon.example.org")
    try:
        for host, status in (("trainmon.example.org", 200), ("trainmon.example.org:443", 200), (REBOUND, 421)):
            answer = httpx.get(started.url + "/api/jobs", headers={"Host": host, **started.headers}, timeout=60)
            assert answer.status_code == status, host
    finally:
        started.stop()


def test_a_request_from_another_site_changes_nothing(server: ServerProcess, tmp_path: Path) -> None:
    base = server.url
    with httpx.Client(base_url=base, headers=server.headers, timeout=60) as client:
        for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {"Origin": "null"},
                        {"Sec-Fetch-Site": "same-site"}, {"Origin": base.replace("127.0.0.1", "localhost")},
                        {"Origin": base.rsplit(":", 1)[0] + ":1"}):
            answer = client.post("/api/jobs", headers=headers, json=_job("cross", tmp_path / "ran"))
            assert answer.status_code == 403 and answer.json()["error"]["code"] == "Forbidden", headers
        assert _jobs(server) == []
        same = client.post("/api/definitions/test", headers={"Origin": base, "Sec-Fetch-Site": "same-origin"},
                           json={"MetricDefinitions": [{"Name": "a", "Regex": "a=(.*)"}], "LogText": "a=1"})
        assert same.status_code == 200


def test_every_answer_says_not_to_guess_its_type_nor_be_embedded(server: ServerProcess) -> None:
    for path, headers in (("/api/jobs", server.headers), ("/api/jobs", {}), ("/login", {}), ("/nothing", {})):
        answer = httpx.get(server.url + path, headers=headers, timeout=60)
        assert answer.headers["x-content-type-options"] == "nosniff", path
        assert answer.headers["cross-origin-resource-policy"] == "same-origin", path


# -- the first use: what the server makes and prints, what the commands give ------------------------


def test_the_first_start_makes_the_credentials_and_says_how_to_use_them(
        home: Path, cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    started = start_server(home)
    try:
        wait_for(lambda: "AWS clients" in "".join(started.output), "the lines on credentials")
        printed = "".join(started.output)
        token = started.token
        assert token in printed and (home / "server-token").stat().st_mode & 0o777 == 0o600
        assert f"{started.url}/login?code=" in printed and "trainmon credentials env" in printed
        assert (home / "access-keys.json").stat().st_mode & 0o777 == 0o600
        environment = cli("credentials", "env", check=True).stdout
        assert f"export AWS_ENDPOINT_URL={started.url}" in environment
        assert f"export AWS_ACCESS_KEY_ID={started.key.AccessKeyId}" in environment
        link = cli("console", check=True).stdout.split()[0]
        assert link.startswith(f"{started.url}/login?code=")
        with httpx.Client(timeout=60) as browser_like:
            signed_in = browser_like.get(link)
            assert signed_in.status_code == 303 and signed_in.headers["location"] == "/"
            cookie = signed_in.headers["set-cookie"].lower()
            assert "httponly" in cookie and "samesite=strict" in cookie and token.lower() not in cookie
            assert browser_like.get(started.url + "/api/jobs").status_code == 200
        assert httpx.get(link, timeout=60).status_code == 401  # a link signs in once
        listed = subprocess.run(["bash", "-c", 'eval "$(trainmon credentials env)" && '
                                 f'{PY} -m awscli sagemaker list-training-jobs'], capture_output=True, text=True,
                                timeout=120, env={**os.environ, "TRAINMON_HOME": str(home),
                                                  "AWS_CONFIG_FILE": "/nonexistent",
                                                  "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"})
        assert listed.returncode == 0 and '"TrainingJobSummaries": []' in listed.stdout, listed.stderr
    finally:
        started.stop()
    again = start_server(home)  # the same credentials, the token not shown again
    try:
        assert token not in "".join(again.output) and again.token == token and len(access_keys.load(home)) == 1
    finally:
        again.stop()


def test_sign_in_codes_and_sessions_are_signed_and_expire() -> None:
    token = "a-token-of-enough-length"
    code = auth.sign_in_code(token, now=1000.0)
    taken = auth.SignIns()
    assert not taken.take("another-token-altogether", code, now=1000.0)
    assert not taken.take(token, code, now=1000.0 + auth.SIGN_IN_S + 1)  # too late
    assert taken.take(token, code, now=1001.0) and not taken.take(token, code, now=1002.0)  # once
    expiry, nonce, mac = code.split(".")
    assert not taken.take(token, f"{int(expiry) + 3600}.{nonce}.{mac}", now=1001.0)  # its expiry is signed
    session = auth.session_value(token, now=1000.0)
    assert auth.valid_session(token, session, now=1000.0 + auth.SESSION_S - 1)
    assert not auth.valid_session(token, session, now=1000.0 + auth.SESSION_S + 1)
    assert not auth.valid_session("another-token-altogether", session, now=1001.0)
    assert not auth.valid_session(token, "9" * 13 + "." + session.split(".")[1], now=1001.0)


def test_commands_say_what_is_missing(home: Path, cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    console = cli("console")
    assert console.returncode == 2 and "no access token" in console.stderr
    environment = cli("credentials", "env")
    assert environment.returncode == 2 and "no server has started" in environment.stderr
    given = cli("credentials", "env", "--url", "http://127.0.0.1:9", check=True).stdout
    assert "AWS_ENDPOINT_URL=http://127.0.0.1:9" in given and "AWS_SECRET_ACCESS_KEY=" in given


def test_without_credentials_only_by_choice_and_still_not_for_other_sites(home: Path, tmp_path: Path) -> None:
    started = start_server(home, "--no-credentials")
    try:
        wait_for(lambda: "WARNING: --no-credentials" in "".join(started.output), "the warning")
        assert not (home / "server-token").exists()
        assert httpx.get(started.url + "/api/jobs", timeout=60).status_code == 200
        port = started.url.rsplit(":", 1)[1]
        foreign = httpx.get(started.url + "/api/jobs", headers={"Host": f"{REBOUND}:{port}"}, timeout=60)
        assert foreign.status_code == 421
        cross = httpx.post(started.url + "/api/jobs", headers={"Origin": "http://evil.example"}, timeout=60,
                           json=_job("cross", tmp_path / "ran"))
        assert cross.status_code == 403
    finally:
        started.stop()


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, signed by its own key, as an operator makes one."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=30))
                   .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                               x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                                  critical=False)
                   .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                   .sign(key, hashes.SHA256()))
    (directory / "cert.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                          serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
    return directory / "cert.pem", directory / "key.pem"


def test_https_with_the_operators_certificate(home: Path, tmp_path: Path,
                                              cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    """``--tls-cert``/``--tls-key``: the console, the API and the AWS doors over HTTPS, the session
    cookie sent over HTTPS only; a wrong file is told before anything listens."""
    cert, key = _self_signed(tmp_path)
    for wrong, said in ((["--tls-cert", str(key)], "no certificate with its unencrypted private key"),
                        (["--tls-cert", str(cert)], "no certificate with its unencrypted private key"),
                        (["--tls-key", str(key)], "--tls-key needs --tls-cert"),
                        (["--tls-cert", str(tmp_path / "none.pem")], "no such file")):
        refused = cli("server", "--port", "0", *wrong, timeout=120)
        assert refused.returncode == 2 and said in refused.stderr, (wrong, refused.stderr)
    started = start_server(home, "--tls-cert", str(cert), "--tls-key", str(key))
    try:
        assert started.url.startswith("https://127.0.0.1:")
        wait_for(lambda: "AWS clients" in "".join(started.output), "the lines on credentials")
        assert f"{started.url}/login?code=" in "".join(started.output)
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(started.url + "/api/jobs", timeout=60)  # TLS for real: an unknown issuer is refused
        plain = "http" + started.url.removeprefix("https")
        with pytest.raises(httpx.TransportError):
            httpx.get(plain + "/api/jobs", headers=started.headers, timeout=60)
        with httpx.Client(verify=ssl.create_default_context(cafile=cert), timeout=60) as browser_like:
            signed_in = browser_like.get(cli("console", check=True).stdout.split()[0])
            assert signed_in.status_code == 303 and "; secure" in signed_in.headers["set-cookie"].lower()
            assert browser_like.get(started.url + "/api/jobs").status_code == 200
        listed = subprocess.run(["bash", "-c", 'eval "$(trainmon credentials env)" && '
                                 f'{PY} -m awscli sagemaker list-training-jobs'], capture_output=True, text=True,
                                timeout=120, env={**os.environ, "TRAINMON_HOME": str(home),
                                                  "AWS_CA_BUNDLE": str(cert), "AWS_CONFIG_FILE": "/nonexistent",
                                                  "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"})
        assert listed.returncode == 0 and '"TrainingJobSummaries": []' in listed.stdout, listed.stderr
    finally:
        started.stop()


def test_behind_a_loopback_proxy_that_ended_tls_the_cookie_is_secure(server: ServerProcess) -> None:
    """A reverse proxy on this machine that says the request came over HTTPS gets a ``Secure``
    cookie; over plain HTTP, with no such word, the cookie stays usable there."""
    for forwarded, secure in (({"X-Forwarded-Proto": "https"}, True), ({}, False)):
        signed_in = httpx.get(server.sign_in_url(), headers=forwarded, timeout=60)
        assert signed_in.status_code == 303
        assert ("; secure" in signed_in.headers["set-cookie"].lower()) is secure, forwarded


# -- in a real browser --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="the browser tests need Playwright for Python")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (set TRAINMON_TEST_CHROMIUM)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            # Chromium's own guard against public pages reaching loopback is off: this tests the server's, which every
            # browser meets
            "--disable-features=LocalNetworkAccessChecks,BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessChecks",
            f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"])
        yield browser
        browser.close()


_ATTACK = """() => Promise.all([
    fetch('/api/jobs').then(r => r.status, e => 'blocked: ' + e),
    fetch('/api/jobs', {method: 'POST', headers: {'Content-Type': 'application/json'},
                        body: JSON.stringify(JOB)}).then(r => r.status, e => 'blocked: ' + e),
])"""


@pytest.mark.parametrize("mode", ["default", "--no-credentials"])
def test_a_page_whose_name_is_rebound_to_loopback_reaches_nothing(chromium: Any, home: Path, tmp_path: Path,
                                                                  mode: str) -> None:
    """DNS rebinding: the attacker's page came from the attacker's server (here: Playwright answers
    its first request), then its name resolves to 127.0.0.1, so its scripts' requests reach the
    server as same-origin ones, with Host and Origin naming the attacker."""
    started = start_server(home, *(() if mode == "default" else (mode,)))
    context = chromium.new_context()
    try:
        port = started.url.rsplit(":", 1)[1]
        origin = f"http://{REBOUND}:{port}"
        page = context.new_page()
        page.route(origin + "/", lambda route: route.fulfill(status=200, content_type="text/html",
                                                             body="<title>a page of the attacker's</title>"))
        page.goto(origin + "/")
        job = json.dumps(_job("rebound", tmp_path / "ran"))
        statuses = page.evaluate(_ATTACK.replace("JOB", job))
        assert statuses == [421, 421]
        check = started.headers if mode == "default" else {}
        listed = httpx.get(started.url + "/api/jobs", headers=check, timeout=60).json()["TrainingJobSummaries"]
        assert listed == [] and not (tmp_path / "ran").exists()
    finally:
        context.close()
        started.stop()


def test_another_local_sites_page_cannot_act_with_the_signed_in_users_cookie(
        chromium: Any, server: ServerProcess, tmp_path: Path) -> None:
    """A page on another port of localhost is same-site: the session cookie goes with its requests,
    and the Origin check is what refuses them."""
    port = server.url.rsplit(":", 1)[1]
    console = f"http://localhost:{port}"
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(server.sign_in_url().replace("127.0.0.1", "localhost"))
        assert page.url == console + "/"
        other = "http://localhost:1"
        page.route(other + "/", lambda route: route.fulfill(status=200, content_type="text/html",
                                                            body="<title>another local page</title>"))
        page.goto(other + "/")
        job = json.dumps(_job("same-site", tmp_path / "ran"))
        page.evaluate(f"""() => fetch('{console}/api/jobs', {{method: 'POST', mode: 'no-cors', credentials: 'include',
                                                            body: JSON.stringify({job})}}).catch(() => null)""")
        page.goto(console + "/")  # the page's request has been answered once the next one is
        assert _jobs(server) == [] and not (tmp_path / "ran").exists()
    finally:
        context.close()


def test_signing_in_from_chromium(chromium: Any, server: ServerProcess) -> None:
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(server.url + "/jobs/anything")
        assert page.url == server.url + "/login"
        assert "trainmon console" in page.inner_text("body")  # a signed-out page says how to sign in
        page.fill("input[name=token]", "not the token")
        page.click("button")
        assert "not the access token" in page.inner_text(".error")
        page.fill("input[name=token]", server.token)
        page.click("button")
        page.wait_for_url(server.url + "/")
        assert page.title().startswith("Jobs")
        fresh = chromium.new_context()
        try:
            other = fresh.new_page()
            link = server.sign_in_url()
            other.goto(link)
            assert other.url == server.url + "/"
            again = chromium.new_context()
            try:
                third = again.new_page()
                third.goto(link)
                assert "used already" in third.inner_text(".error")
            finally:
                again.close()
        finally:
            fresh.close()
    finally:
        context.close()


def test_an_html_object_opened_in_the_signed_in_browser_runs_nothing(chromium: Any, server: ServerProcess,
                                                                    tmp_path: Path) -> None:
    """An object's bytes come from whoever could upload; shown on the console's origin, its script
    would act with the user's cookie. Stored as HTML, or asked for as HTML, it stays inert."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=server.url, region_name="us-east-1",
                      aws_access_key_id=server.key.AccessKeyId, aws_secret_access_key=server.key.SecretAccessKey)
    s3.create_bucket(Bucket="uploads")
    job = json.dumps(_job("from-an-object", tmp_path / "ran"))
    attack = (f"<title>inert</title><script>document.title = 'ran'; fetch('/api/jobs', {{method: 'POST', "
              f"headers: {{'Content-Type': 'application/json'}}, body: JSON.stringify({job})}})</script>").encode()
    s3.put_object(Bucket="uploads", Key="page.html", Body=attack, ContentType="text/html")
    s3.put_object(Bucket="uploads", Key="notes.txt", Body=attack, ContentType="text/plain")
    downloads = [s3.generate_presigned_url("get_object", Params={"Bucket": "uploads", "Key": "page.html"}),
                 s3.generate_presigned_url("get_object", Params={"Bucket": "uploads", "Key": "notes.txt",
                                                                 "ResponseContentType": "text/html"})]
    shown = s3.generate_presigned_url("get_object", Params={"Bucket": "uploads", "Key": "notes.txt"})
    context = chromium.new_context(accept_downloads=True)
    try:
        page = context.new_page()
        page.goto(server.sign_in_url())
        for url in downloads:
            tab = context.new_page()
            with tab.expect_download() as download:
                with pytest.raises(Exception, match="Download is starting"):
                    tab.goto(url)
            assert download.value.suggested_filename in ("page.html", "notes.html")
            tab.close()
        tab = context.new_page()
        tab.goto(shown)  # plain text is shown as text, in a sandbox that would run nothing anyway
        assert "<script>" in tab.inner_text("body") and tab.title() != "ran"
        tab.close()
        page.goto(server.url + "/")  # the object's requests, had any been made, are answered by now
        assert page.title().startswith("Jobs")
    finally:
        context.close()
    assert _jobs(server) == [] and not (tmp_path / "ran").exists()
