"""Instructions per admission, counted by valgrind's callgrind: deterministic where wall-clock time is not.

Run it with scripts/bench-instructions. It measures a fixed mix of AdmissionReviews (a plain GPU Pod
sized by the default preset, a vLLM Pod sized from the model catalog, a denied Pod, a Pod without
GPUs; each with its own uid and Pod name), with the audit off and on (spooled, written with COPY):

- served: one gunicorn worker (injector_site/gunicorn_conf.py, one worker, plain HTTP, PostgreSQL)
  under callgrind, fed over one keep-alive connection: two runs, of WARMUP and of WARMUP + ADMISSIONS
  admissions, each counted from the worker's start to its exit (the audit writer's COPY included), the
  difference taken;
- periodic: what the worker does on the wall clock whatever the traffic (the audit writer's cycle, the
  configuration's recheck, the main loop's turns), per second of an idle worker with the webhook's own
  intervals. The served runs hold it off while admissions are counted (see environment()), so that their
  count follows the code and not the machine's load;
- in-process: the WSGI application alone (injector_site.wsgi.application), called in a loop under
  callgrind, and each stage of an admission on its own, on the same mix: parse, decide (as /mutate decides:
  the engine, the patch and the answer), response, metrics, audit record, spool, audit write (COPY), log;
  and, not part of the sum, the engine alone and the patch alone on every Pod. What the stages leave of the
  WSGI total is the glue (WSGI, the body's read, the view); what the in-process total leaves of the
  served one is gunicorn with the request gate and framing.

In-process, the counters are dumped by the process itself between stages (callgrind_control --dump, a
constant cost that an empty stage measures and each stage has taken off); what the stages keep for later
ones is collected and frozen between windows. PYTHONHASHSEED is fixed, so the same code on the same inputs
counts the same. Results and how to read them: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PYTHON = REPO / ".venv" / "bin" / "python"
DEFAULT_DATABASE = "postgres://postgres@127.0.0.1:5432/volcano_injector_instructions"
STAGES = ("parse", "decide", "response", "metrics", "audit record", "audit spool", "audit write", "log")
# Measured too, but not stages of the sum: what deciding costs where nothing is remembered.
ENGINE_ALONE = {"engine": "engine alone (mutate_pod)", "engine patch": "patch alone (make_patch)"}
SUMMARY = re.compile(rb"^summary: (\d+)$", re.M)
TRIGGER = re.compile(rb"^desc: Trigger: (?:Client Request|dump) ?(.*)$", re.M)


def mix(count: int, prefix: str) -> list[bytes]:
    """`count` AdmissionReview bodies cycling through the four Pods of the mix, each with a uid and a Pod name of
    its own (as replicas have: a StatefulSet's `web-3`, a generated `qwen-7b-5d9f8b7c6d-x2k9q`)."""
    from tests.support import pods

    kinds = [
        pods.vllm_deployment_pod(model=None),  # sized by the default preset
        pods.vllm_deployment_pod(),  # sized from the catalog (Qwen2.5-7B-Instruct)
        pods.vllm_deployment_pod(annotations={"volcano-injector.io/preset": "no-such-preset"}),  # denied
        pods.cpu_pod(),  # no GPU
    ]
    bodies = []
    for i in range(count):
        pod = kinds[i % len(kinds)]
        metadata = pod["metadata"]
        name = f"{metadata.get('generateName') or metadata['name'] + '-'}{prefix}-{i}"
        pod = {**pod, "metadata": {**metadata, "name": name}}
        bodies.append(json.dumps(pods.review(pod, uid=f"{prefix}-{i}")).encode())
    return bodies


def environment(*, database: str, audit: bool, work: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONHASHSEED": "0",
        "DATABASE_URL": database,
        "DJANGO_SECRET_KEY": "bench-instructions",
        "INJECTOR_DEV_MODE": "false",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "INJECTOR_AUDIT_ENABLED": "true" if audit else "false",
        "INJECTOR_AUDIT_SPOOL_DIR": str(work / "spool"),
        "PROMETHEUS_MULTIPROC_DIR": str(work / "prometheus"),
        "LOG_LEVEL": "INFO",
        # The worker's periodic work runs on the wall clock, which valgrind's slowdown and the machine's load
        # stretch: counted with the admissions, it moved a served count by up to 7 % between runs of one build.
        # So no cycle comes round while admissions are counted (the first of each, at the worker's start, is
        # in both runs and cancels out): the audit writer's rows are all written at the worker's exit (one
        # flush, in batches as a loaded webhook's; in-process, one flush after the run, with
        # INJECTOR_AUDIT_WRITER_AUTOSTART=false set below), and the configuration's recheck waits. What that
        # periodic work costs per second is measured apart (--modes periodic) and reported beside.
        "INJECTOR_AUDIT_FLUSH_SECONDS": "3600",
        "INJECTOR_CONFIG_RECHECK_SECONDS": "3600",
    }


def callgrind_dumps(prefix: Path) -> dict[str, int]:
    """Instructions of each dump, by its label, from every callgrind output file starting with `prefix`."""
    found: dict[str, int] = {}
    for path in sorted(prefix.parent.glob(prefix.name + "*")):
        data = path.read_bytes()
        label = TRIGGER.search(data)
        total = SUMMARY.search(data)
        if label and total:
            found[label.group(1).decode() or path.name] = int(total.group(1))
    return found


def valgrind(out: Path) -> list[str]:
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p", "--dump-line=no",
            "--compress-strings=no", "--vgdb=yes"]


# --- in-process --------------------------------------------------------------------------------------


def child_inprocess(args: argparse.Namespace) -> None:
    """Runs under callgrind: the WSGI application, then each stage, each followed by a dump."""
    import gc
    import io

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "injector_site.settings")
    django.setup()
    import logging

    import orjson

    from injector_site.wsgi import application
    from mutations.audit import audit_flush, audit_record_submit
    from mutations.engine import Decision, admission, make_patch, mutate_pod, select_policy
    from mutations.engine.specs import MutationContext
    from mutations.metrics import admission_observe
    from mutations.webhook import services
    from mutations.webhook.record import audit_record_build
    from mutations.webhook.views import _body_bytes_problem
    from profiles.catalog import catalog_current

    logging.getLogger("volcano_injector").handlers[0].stream = open(os.devnull, "w")  # noqa: SIM115 - for the run

    def dump(label: str) -> None:
        subprocess.run(["callgrind_control", f"--dump={label}", str(os.getpid())], check=True,
                       capture_output=True)

    def call(body: bytes) -> None:
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/mutate", "CONTENT_TYPE": "application/json",
                   "CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body), "SERVER_NAME": "127.0.0.1",
                   "SERVER_PORT": "8443", "wsgi.url_scheme": "http"}
        for _ in application(environ, lambda status, headers: None):
            pass

    for body in mix(args.warmup, "warm"):
        call(body)
    audit_flush()
    bodies = mix(args.admissions, "run")
    # As the worker does after loading the app (gunicorn_conf.post_worker_init): what lives for the whole
    # process is frozen out of the collector's way.
    gc.collect()
    gc.freeze()
    dump("setup")
    for body in bodies:
        call(body)
    audit_flush()
    dump("wsgi")
    # The same admissions, stage by stage (each stage's inputs are made before its dump window opens, and
    # frozen: a collection set off by the inputs kept for later stages must not be counted in a stage).
    raws = [orjson.loads(body) for body in bodies]

    def prepared() -> None:
        gc.collect()
        gc.freeze()
        dump("prepare")

    prepared()
    for body in bodies:
        _body_bytes_problem(body)
        admission.parse_review(orjson.loads(body))
    dump("parse")
    requests = [admission.parse_review(raw) for raw in raws]
    prepared()
    decided = [services._pod_decide(request) for request in requests]  # as /mutate decides
    dump("decide")
    for request, (_, answer) in zip(requests, decided, strict=True):
        orjson.dumps(services._response(request, answer))
    dump("response")
    previews = [preview for preview, _ in decided]
    prepared()
    for preview in previews:
        admission_observe(decision=preview.result.decision, namespace=preview.namespace, result=preview.result,
                          field=preview.result.field or "", dry_run=False, duration_seconds=0.001)
    dump("metrics")
    records = []
    for request, preview in zip(requests, previews, strict=True) if args.audit else ():
        records.append(audit_record_build(request=request, preview=preview, decision=preview.result.decision,
                                          reason=preview.result.reason, field=preview.result.field or "",
                                          duration=0.001))
    dump("audit record")
    prepared()
    if args.audit:
        for record in records:
            record["request_uid"] = "stage-" + record["request_uid"]
            audit_record_submit(record=record)
    dump("audit spool")
    if args.audit:
        audit_flush()
    dump("audit write")
    for request, preview in zip(requests, previews, strict=True):
        services._log(request, preview, preview.result.decision, preview.result.reason, 0.001)
    dump("log")
    catalog = catalog_current()
    contexts = [MutationContext(namespace=request.namespace, policy=select_policy(catalog.policies, request.namespace),
                                catalog=catalog) for request in requests]
    prepared()
    results = [mutate_pod(request.object, context) for request, context in zip(requests, contexts, strict=True)]
    dump("engine")
    for request, result in zip(requests, results, strict=True):
        if result.decision in (Decision.MUTATED, Decision.AUDIT_ONLY):
            make_patch(request.object, result.pod)
    dump("engine patch")
    dump("empty")


def inprocess(args: argparse.Namespace, *, audit: bool, work: Path) -> dict[str, float]:
    out = work / f"inprocess-{'on' if audit else 'off'}"
    (work / "prometheus").mkdir(exist_ok=True)
    command = [*valgrind(out), str(PYTHON), __file__, "--child", "inprocess", "--warmup", str(args.warmup),
               "--admissions", str(args.admissions)] + (["--audit"] if audit else [])
    env = {**environment(database=args.database_url, audit=audit, work=work),
           "INJECTOR_AUDIT_WRITER_AUTOSTART": "false"}
    with open(work / f"{out.name}.log", "w") as log:
        done = subprocess.run(command, cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=log)
    if done.returncode:
        raise SystemExit(f"the in-process run failed:\n{(work / f'{out.name}.log').read_text()[-3000:]}")
    dumps = callgrind_dumps(out)
    overhead = dumps["empty"]
    per = {"in-process": (dumps["wsgi"] - overhead) / args.admissions}
    for stage in STAGES:
        per[stage] = max(dumps[stage] - overhead, 0) / args.admissions
    per["glue (WSGI, view, body read)"] = per["in-process"] - sum(per[s] for s in STAGES)
    for label, name in ENGINE_ALONE.items():
        per[name] = max(dumps[label] - overhead, 0) / args.admissions
    return per


# --- served --------------------------------------------------------------------------------------------


def served(args: argparse.Namespace, *, audit: bool, work: Path) -> float:
    """Instructions per admission of one gunicorn worker: two runs of the same server, WARMUP admissions and
    WARMUP + ADMISSIONS, each counted from the worker's start to its exit; the difference over ADMISSIONS.
    (callgrind_control cannot reach a forked worker, so the counts are the worker's totals at exit.)"""
    short = _served_total(args, audit=audit, work=work, count=args.warmup, name="short")
    long = _served_total(args, audit=audit, work=work, count=args.warmup + args.admissions, name="long")
    return (long - short) / args.admissions


# The periodic work as a webhook runs it (settings.py's defaults), for --modes periodic.
PERIODIC_SETTINGS = {"INJECTOR_AUDIT_FLUSH_SECONDS": "0.25", "INJECTOR_CONFIG_RECHECK_SECONDS": "1"}


def periodic(args: argparse.Namespace, *, audit: bool, work: Path) -> float:
    """Instructions per second of an idle worker's periodic work (the audit writer's cycle, the configuration's
    recheck, the main loop's turns) with the webhook's own intervals: two runs of WARMUP admissions, the second
    left idle for IDLE seconds before it stops, the difference over IDLE. Sleeps are wall-clock time, which
    valgrind does not stretch, so this counts what a second of it costs on a real worker."""
    short = _served_total(args, audit=audit, work=work, count=args.warmup, name="idle-0", settings=PERIODIC_SETTINGS)
    long = _served_total(args, audit=audit, work=work, count=args.warmup, name=f"idle-{args.idle}",
                         settings=PERIODIC_SETTINGS, idle_seconds=args.idle)
    return (long - short) / args.idle


def _served_total(args: argparse.Namespace, *, audit: bool, work: Path, count: int, name: str,
                  settings: dict[str, str] | None = None, idle_seconds: float = 0) -> int:
    from tests.support.servers import free_port, process_group_stop

    out = work / f"served-{'on' if audit else 'off'}-{name}"
    port = free_port()
    env = {**environment(database=args.database_url, audit=audit, work=work), **(settings or {})}
    env.update({"GUNICORN_BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": "1", "GUNICORN_THREADS": "2",
                "PATH": f"{PYTHON.parent}{os.pathsep}{env.get('PATH', '')}"})
    (work / "prometheus").mkdir(exist_ok=True)
    log = open(work / f"{out.name}.log", "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen([*valgrind(out), str(PYTHON), str(PYTHON.parent / "gunicorn"), "-c",
                               str(REPO / "injector_site" / "gunicorn_conf.py"), "injector_site.wsgi:application"],
                              cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        connection = _connect(port, deadline=time.monotonic() + 600)
        for body in mix(count, f"{out.name}-{os.getpid()}"):
            _post(connection, body)
        connection.close()
        time.sleep(idle_seconds)
    finally:
        process_group_stop(server, timeout_seconds=300)  # SIGTERM: the worker writes what it spooled, then exits
        log.close()
    totals = {path.name: int(found.group(1)) for path in work.glob(out.name + ".*")
              if (found := SUMMARY.search(path.read_bytes()))}
    workers = [total for file, total in totals.items() if not file.endswith(f".{server.pid}")]
    if len(workers) != 1:
        raise SystemExit(f"expected one gunicorn worker's count in {work}, found {sorted(totals)}")
    return workers[0]


def _connect(port: int, *, deadline: float) -> http.client.HTTPConnection:
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            connection.request("GET", "/readyz")
            if connection.getresponse().read() and True:
                return connection
        except OSError:
            time.sleep(1)
    raise SystemExit("gunicorn under valgrind did not answer /readyz in time")


def _post(connection: http.client.HTTPConnection, body: bytes) -> None:
    """POST one review in one write, as the API server's Go client sends a review this small. (http.client
    writes the head and the body apart: whether the worker then read the request in one turn of its loop or
    two followed the scheduler, and a busy machine made most of them two, +94,000 instructions each.) The
    head is http.client's, byte for byte."""
    head = (f"POST /mutate HTTP/1.1\r\nHost: {connection.host}:{connection.port}\r\nAccept-Encoding: identity\r\n"
            f"Content-Length: {len(body)}\r\nContent-Type: application/json\r\n\r\n").encode()
    assert connection.sock is not None  # connected by _connect
    connection.sock.sendall(head + body)
    response = http.client.HTTPResponse(connection.sock, method="POST")
    response.begin()
    response.read()
    if response.status != 200:
        raise SystemExit(f"/mutate answered {response.status}")


# --- main ----------------------------------------------------------------------------------------------


def database_ready(url: str) -> None:
    from tests.support.servers import database_recreate

    database_recreate(url)
    env = {**os.environ, "DATABASE_URL": url, "INJECTOR_DEV_MODE": "true"}
    subprocess.run([str(PYTHON), "manage.py", "migrate", "--no-input", "-v", "0"], check=True, cwd=REPO, env=env)


def measure(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    database_ready(args.database_url)
    results: dict[str, dict[str, float]] = {}
    with (tempfile.TemporaryDirectory(prefix="bench-instructions-") if not args.keep else
          _kept(args.keep)) as directory:
        for audit in (False, True):
            work = Path(directory) / ("audit-on" if audit else "audit-off")
            work.mkdir()
            row: dict[str, float] = {}
            if "served" in args.modes:
                row["served"] = served(args, audit=audit, work=work)
            if "inprocess" in args.modes:
                row.update(inprocess(args, audit=audit, work=work))
            if "periodic" in args.modes:
                row["periodic work per idle second"] = periodic(args, audit=audit, work=work)
            if "served" in row and "in-process" in row:
                row["gunicorn + request gate + framing"] = row["served"] - row["in-process"]
            results["audit on" if audit else "audit off"] = row
    return results


@contextlib.contextmanager
def _kept(parent: str) -> Iterator[str]:
    yield tempfile.mkdtemp(prefix="bench-instructions-", dir=parent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admissions", type=int, default=200, help="admissions counted (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=20, help="admissions before counting")
    parser.add_argument("--modes", default="served,inprocess,periodic", help="served, inprocess, periodic (comma list)")
    parser.add_argument("--idle", type=int, default=10, help="seconds an idle worker is counted (periodic)")
    parser.add_argument("--database-url", default=os.environ.get("INSTRUCTIONS_BENCH_DATABASE_URL", DEFAULT_DATABASE))
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--keep", help="make the work directory (callgrind files, logs) in this directory, kept")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--audit", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "inprocess":
        child_inprocess(args)
        return
    results = measure(args)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"instructions per admission (callgrind; {args.admissions} admissions after {args.warmup}; "
          "mix: default-preset GPU Pod, catalog vLLM Pod, denied Pod, Pod without GPUs)")
    names = list(dict.fromkeys(name for row in results.values() for name in row))
    print(f"{'':36}" + "".join(f"{column:>14}" for column in results))
    for name in names:
        print(f"{name:36}" + "".join(f"{results[c].get(name, float('nan')):>14,.0f}" for c in results))


if __name__ == "__main__":
    main()
