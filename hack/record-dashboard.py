#!/usr/bin/env python3
"""Records the chart's Grafana dashboard with real data, for the dashboard picture of the docs site.

On the cluster of KUBECONFIG (`make cluster-up`, then `eval "$(hack/cluster.sh env)"`), with no
operator running there yet: starts a Prometheus (hack/tools.sh prometheus) scraping the operator's
/metrics every second, starts the operator (hack/run-local.sh --background, its spans sent to an
OTLP receiver in this script), and plays a scenario: two SidecarSets (one paused), PODS pods
(default 100) that get their sidecar and 20 that are skipped, three SidecarSets refused (invalid,
conflicting, pods that would be invalid), 30 bare pods skipped (their skip Events over the
namespace's rate are dropped), a rollout of a new sidecar image paused for 20 s half way,
the serving certificate overwritten in its Secret and a caBundle removed from the webhook
configuration (both repaired by the operator), and the Deployment scaled down.

Then every target of every panel of charts/sidecarset-operator/dashboards/sidecarset-operator.json
is evaluated over the whole run with Prometheus's query_range API, the dashboard's variables
substituted as Grafana would with "All" selected: $namespace with the values of its own query
(label_values(sidecarset_operator_leader, namespace)), $__rate_interval 15s, $__range the length
of the run. The results go to docs/src/pictures/data/dashboard.json with the run's circumstances;
`hack/pictures.py write` draws docs/src/pictures/dashboard.svg from it.

A target that Prometheus refuses fails the run (the dashboard is wrong: fix it); a target that
returns no data is reported, and the run fails unless ALLOW_NO_DATA=1. Cleans up what it made
and stops what it started.

  hack/record-dashboard.py [PODS]

Env: KUBECTL, SSO_BIN (the operator binary for hack/run-local.sh), PROMETHEUS (a prometheus
binary; default: built by hack/tools.sh prometheus), ALLOW_NO_DATA=1.
"""

import datetime
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DASHBOARD = os.path.join(REPO, "charts/sidecarset-operator/dashboards/sidecarset-operator.json")
OUT = os.path.join(REPO, "docs/src/pictures/data/dashboard.json")
WORK = os.environ.get("SSO_WORK") or os.path.join(REPO, ".local")
NS = "sso-dashboard-picture"
OPERATOR_NS = "sidecarset-system"
CERT_SECRET = "sidecarset-operator-webhook-certs"
SCRAPE = 1  # seconds between scrapes
STEP = 2  # seconds between the points of query_range
RATE_INTERVAL = "15s"
KUBECTL = os.environ.get("KUBECTL") or (
    os.path.join(WORK, "bin/kubectl") if os.path.exists(os.path.join(WORK, "bin/kubectl")) else "kubectl"
)


def log(msg):
    print(f"[record-dashboard] {msg}", file=sys.stderr, flush=True)


def kubectl(*args, stdin=None, check=True):
    r = subprocess.run([KUBECTL, *args], input=stdin, capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
    return r


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


class OtlpReceiver:
    """An OTLP/HTTP receiver that accepts every trace export (an empty protobuf answer is an
    ExportTraceServiceResponse with nothing rejected) and counts them."""

    def __init__(self):
        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()


def prometheus_binary():
    if os.environ.get("PROMETHEUS"):
        return os.environ["PROMETHEUS"]
    out = subprocess.run([os.path.join(REPO, "hack/tools.sh"), "prometheus"], stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        sys.exit("hack/tools.sh prometheus failed")
    for line in out.stdout.splitlines():
        if line.startswith("PROMETHEUS_BIN="):
            return os.path.join(line.split("=", 1)[1], "prometheus")
    sys.exit("hack/tools.sh prometheus printed no PROMETHEUS_BIN")


class Prometheus:
    """A Prometheus of its own (temporary storage) scraping the operator's metrics endpoint, with
    the target labels a ServiceMonitor gives it (namespace, job)."""

    def __init__(self, binary, target):
        self.dir = tempfile.mkdtemp(prefix="sso-prometheus-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        with open(os.path.join(self.dir, "prometheus.yml"), "w") as f:
            f.write(json.dumps({
                "global": {"scrape_interval": f"{SCRAPE}s", "scrape_timeout": f"{SCRAPE}s"},
                "scrape_configs": [{
                    "job_name": "sidecarset-operator",
                    "static_configs": [{"targets": [target],
                                        "labels": {"namespace": OPERATOR_NS, "service": "sidecarset-operator-metrics"}}],
                }],
            }))
        self.version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
        self.log = open(os.path.join(self.dir, "prometheus.log"), "w")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={self.dir}/prometheus.yml", f"--storage.tsdb.path={self.dir}/data",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=self.dir)
        for _ in range(120):
            try:
                http_get(f"{self.url}/-/ready")
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.5)
        self.stop()
        sys.exit(f"prometheus did not get ready; its log: {self.dir}/prometheus.log")

    def api(self, path, **params):
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            body = http_get(url, timeout=30)
        except urllib.error.HTTPError as e:
            body = e.read().decode()
        return json.loads(body)

    def stop(self, keep=False):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)


class Operator:
    """The operator as a local process (hack/run-local.sh --background), traces to `otlp`."""

    def __init__(self, metrics_port, otlp):
        env = dict(os.environ, SSO_METRICS_PORT=str(metrics_port), SSO_PORT=os.environ.get("SSO_PORT") or "19443",
                   OTEL_EXPORTER_OTLP_ENDPOINT=otlp,
                   OTEL_BSP_SCHEDULE_DELAY="1000")
        self.pidfile = os.path.join(WORK, "operator.pid")
        self.metrics = f"http://127.0.0.1:{metrics_port}/metrics"
        r = subprocess.run([os.path.join(REPO, "hack/run-local.sh"), "--background"], env=env)
        if r.returncode != 0:
            sys.exit("hack/run-local.sh --background failed (an operator already running? stop it first)")
        self.pid = int(open(self.pidfile).read().strip())

    def leading(self):
        try:
            return re.search(r"^sidecarset_operator_leader 1\b", http_get(self.metrics), re.M) is not None
        except OSError:
            return False

    def stop(self):
        try:
            os.kill(self.pid, 15)
        except ProcessLookupError:
            pass
        if os.path.exists(self.pidfile) and open(self.pidfile).read().strip() == str(self.pid):
            os.remove(self.pidfile)


def wait(what, cond, timeout=180, every=0.5):
    deadline = time.time() + timeout
    while not cond():
        if time.time() > deadline:
            sys.exit(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def sidecarset(name, selector, container, image="registry.local/proxy:1.0", resources=None, **spec):
    c = {"name": container, "image": image, "command": ["sleep", "infinity"]}
    if resources:
        c["resources"] = resources
    return json.dumps({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet", "metadata": {"name": name},
        "spec": {"namespace": NS, "selector": selector,
                 "updateStrategy": {"type": "RollingUpdate", "maxUnavailable": "10%"},
                 "containers": [c], **spec},
    })


def deployment(name, replicas):
    labels = {"app": name}
    return json.dumps({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "app", "image": "registry.local/app:1.0"}]}}},
    })


def ready_replicas(name):
    r = kubectl("-n", NS, "get", "deployment", name, "-o", "json", check=False)
    return json.loads(r.stdout).get("status", {}).get("readyReplicas", 0) if r.returncode == 0 else 0


def ss_status(name):
    o = json.loads(kubectl("get", "sidecarset", name, "-o", "json").stdout)
    s = o.get("status", {})
    s["current"] = s.get("observedGeneration") == o["metadata"]["generation"]
    return s


class Scenario:
    def __init__(self, pods):
        self.pods = pods
        self.start = time.time()
        self.steps = []

    def step(self, what):
        at = time.time() - self.start
        self.steps.append({"at": round(at, 1), "what": what})
        log(f"{at:6.1f} s  {what}")

    def refused(self, what, manifest, says):
        r = kubectl("create", "-f", "-", stdin=manifest, check=False)
        if r.returncode == 0 or "denied" not in r.stderr or says not in r.stderr:
            sys.exit(f"{what} was not refused by the validating webhook with {says!r}: {r.stdout}{r.stderr}")
        log(f"         refused: {r.stderr.strip()[:200]}")

    def run(self):
        pods = self.pods
        self.step("baseline: the operator leads, nothing to do")
        time.sleep(10)
        kubectl("create", "namespace", NS)
        self.step("SidecarSets web-proxy and batch-agent (paused) created")
        kubectl("apply", "-f", "-", stdin=sidecarset("web-proxy", {"matchLabels": {"app": "web"}}, "proxy"))
        kubectl("apply", "-f", "-", stdin=sidecarset("batch-agent", {"matchLabels": {"app": "batch"}}, "agent",
                                                      injectionStrategy={"paused": True}))
        time.sleep(5)
        self.step(f"Deployments web ({pods} pods, injected) and batch (20 pods, skipped: paused)")
        kubectl("apply", "-f", "-", stdin=deployment("web", pods))
        kubectl("apply", "-f", "-", stdin=deployment("batch", 20))
        wait("the Deployments' pods to be ready", lambda: ready_replicas("web") == pods and ready_replicas("batch") == 20)
        wait("web-proxy's status to count every pod",
             lambda: (lambda s: s["current"] and s.get("readyPods") == pods)(ss_status("web-proxy")))
        time.sleep(10)
        self.step("three SidecarSets refused: invalid, conflicting, pods that would be invalid")
        self.refused("a SidecarSet with an empty selector", sidecarset("refused-invalid", {}, "x"), "is invalid")
        self.refused("a second SidecarSet injecting proxy into the web pods",
                     sidecarset("refused-conflict", {"matchLabels": {"app": "web"}}, "proxy"), "conflicts with another")
        self.refused("a SidecarSet whose container requests more CPU than its limit",
                     sidecarset("refused-pod", {"matchLabels": {"app": "none"}}, "x", resources={
                         "requests": {"cpu": "2"}, "limits": {"cpu": "1"}}), "pods with these sidecars would be refused")
        time.sleep(10)
        self.step("30 bare pods selected by the paused SidecarSet: skipped, their Events over the namespace's rate dropped")
        for i in range(30):
            kubectl("-n", NS, "run", f"bare-{i}", "--image=registry.local/app:1.0", "--labels=app=batch",
                    "--restart=Never")
        time.sleep(15)
        self.step("rollout: web-proxy's image 1.0 -> 2.0")
        kubectl("apply", "-f", "-", stdin=sidecarset("web-proxy", {"matchLabels": {"app": "web"}}, "proxy",
                                                      image="registry.local/proxy:2.0"))
        wait("half of the pods updated",
             lambda: (lambda s: s["current"] and s.get("updatedPods", 0) >= pods // 2)(ss_status("web-proxy")), every=0.2)
        self.step("rollout paused (updateStrategy.paused) for 20 s")
        kubectl("patch", "sidecarset", "web-proxy", "--type=merge", "-p", '{"spec":{"updateStrategy":{"paused":true}}}')
        time.sleep(20)
        self.step("rollout resumed")
        kubectl("patch", "sidecarset", "web-proxy", "--type=merge", "-p", '{"spec":{"updateStrategy":{"paused":false}}}')
        wait("every pod updated and ready",
             lambda: (lambda s: s["current"] and s.get("updatedReadyPods") == pods)(ss_status("web-proxy")))
        time.sleep(10)
        self.step("serving certificate in its Secret overwritten (the operator renews it)")
        broken = "bm90IGEgY2VydGlmaWNhdGU="  # "not a certificate"
        kubectl("-n", OPERATOR_NS, "patch", "secret", CERT_SECRET, "--type=json",
                "-p", json.dumps([{"op": "replace", "path": "/data/tls.crt", "value": broken}]))
        wait("the Secret's tls.crt to be renewed", lambda: json.loads(
            kubectl("-n", OPERATOR_NS, "get", "secret", CERT_SECRET, "-o", "json").stdout)["data"]["tls.crt"] != broken,
            timeout=120)
        time.sleep(10)
        hook = webhook_configuration()
        self.step(f"caBundle removed from {hook} (the operator writes it back)")
        kubectl("patch", "mutatingwebhookconfiguration", hook, "--type=json",
                "-p", '[{"op":"remove","path":"/webhooks/0/clientConfig/caBundle"}]')
        wait("the caBundle to be written back", lambda: json.loads(
            kubectl("get", "mutatingwebhookconfiguration", hook, "-o", "json").stdout)["webhooks"][0]
            .get("clientConfig", {}).get("caBundle"), timeout=120)
        time.sleep(10)
        self.step(f"web scaled down to {pods // 2}")
        kubectl("-n", NS, "scale", "deployment", "web", f"--replicas={pods // 2}")
        wait("the pods to go", lambda: ss_status("web-proxy").get("matchedPods") == pods // 2)
        time.sleep(15)
        self.step("end")


def webhook_configuration():
    items = json.loads(kubectl("get", "mutatingwebhookconfigurations", "-o", "json").stdout)["items"]
    names = [i["metadata"]["name"] for i in items
             if any("mutate-pod" in (w.get("clientConfig", {}).get("url") or w.get("clientConfig", {})
                                     .get("service", {}).get("path") or "") for w in i.get("webhooks", []))]
    if not names:
        sys.exit("no mutating webhook configuration calls /mutate-pod: is the operator managing its webhooks?")
    return names[0]


def legend(fmt, metric):
    if not fmt:
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items())) + "}"
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt).strip()


def evaluate(prom, dashboard, start, end):
    """Every target of every panel over [start, end]; returns (panels, problems)."""
    var = next(v for v in dashboard["templating"]["list"] if v["name"] == "namespace")
    m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["definition"])
    if not m:
        sys.exit(f"the namespace variable's query is not label_values(METRIC, LABEL): {var['definition']}")
    values = prom.api(f"label/{m.group(2)}/values", **{"match[]": m.group(1), "start": start, "end": end})
    if values.get("status") != "success" or not values["data"]:
        sys.exit(f"the dashboard's variable $namespace ({var['definition']}) has no value: {values}")
    subst = {
        "$namespace": "(" + "|".join(re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\\\1", v) for v in values["data"]) + ")",
        "$__rate_interval": RATE_INTERVAL,
        "$__range": f"{int(end - start)}s",
    }
    panels, problems = [], []
    for p in dashboard["panels"]:
        if p["type"] == "row":
            continue
        out = {"id": p["id"], "targets": []}
        for t in p.get("targets", []):
            query = t["expr"]
            for k, v in subst.items():
                query = query.replace(k, v)
            r = prom.api("query_range", query=query, start=start, end=end, step=STEP)
            where = f"panel {p['title']!r}, target {t.get('refId', '?')} ({t['expr']})"
            if r.get("status") != "success":
                problems.append(f"ERROR {where}: {r.get('errorType')}: {r.get('error')}")
                continue
            series = []
            for s in r["data"]["result"]:
                by_t = {round(float(ts) - start): float(v) for ts, v in s["values"]}
                vals = [by_t.get(k * STEP) for k in range(int((end - start) // STEP) + 1)]
                series.append({"legend": legend(t.get("legendFormat"), s["metric"]),
                               "values": [None if v is None or v != v else float(f"{v:.4g}") for v in vals]})
            series.sort(key=lambda s: s["legend"])
            if not series or all(v is None for s in series for v in s["values"]):
                problems.append(f"NO DATA {where}")
            out["targets"].append({"refId": t.get("refId"), "expr": t["expr"], "query": query, "series": series})
            log(f"  {p['title']:<24} {t.get('refId', '?')}: {len(series)} series")
        panels.append(out)
    return panels, subst, problems


def main():
    pods = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    dashboard = json.load(open(DASHBOARD))
    wait(f"namespace {NS} of an earlier run to be deleted",
         lambda: kubectl("get", "namespace", NS, check=False).returncode != 0, timeout=120, every=1)
    binary = prometheus_binary()
    metrics_port = free_port()
    otlp = OtlpReceiver()
    prom = Prometheus(binary, f"127.0.0.1:{metrics_port}")
    log(f"{prom.version} on {prom.url}, scraping 127.0.0.1:{metrics_port} every {SCRAPE} s")
    operator, ok = None, False
    try:
        operator = Operator(metrics_port, otlp.endpoint)
        wait("the operator to lead", operator.leading, timeout=120)
        scenario = Scenario(pods)
        start = int(scenario.start) - int(scenario.start) % STEP
        scenario.run()
        time.sleep(2 * SCRAPE)
        end = start + (int(time.time()) - start) // STEP * STEP
        log(f"evaluating the dashboard's targets over {end - start} s")
        panels, subst, problems = evaluate(prom, dashboard, start, end)
        for p in problems:
            log(p)
        if any(p.startswith("ERROR") for p in problems):
            sys.exit("Prometheus refused targets of the dashboard: fix charts/sidecarset-operator/dashboards/sidecarset-operator.json")
        if problems and os.environ.get("ALLOW_NO_DATA") != "1":
            sys.exit(f"{len(problems)} targets returned no data (ALLOW_NO_DATA=1 to write them as such)")
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        server = json.loads(kubectl("version", "-o", "json").stdout).get("serverVersion", {}).get("gitVersion", "?")
        data = {
            "recorded": {
                "by": f"hack/record-dashboard.py {pods}",
                "date": str(datetime.date.today()),
                "commit": commit,
                "cluster": f"kube-apiserver {server} with kwok nodes (make cluster-up)",
                "operator": "a local process (hack/run-local.sh), webhooks by URL, traces to an OTLP receiver of the script",
                "prometheus": prom.version,
                "scrape_interval_seconds": SCRAPE,
                "start": start, "end": end, "step_seconds": STEP,
                "variables": subst,
                "otlp_exports_received": otlp.requests,
                "scenario": [dict(s, at=round(s["at"] + scenario.start - start, 1)) for s in scenario.steps],
                "no_data": problems,
            },
            "panels": panels,
        }
        os.makedirs(os.path.dirname(OUT), exist_ok=True)
        with open(OUT, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.write("\n")
        log(f"wrote {os.path.relpath(OUT, REPO)}: {end - start} s, {len(panels)} panels, "
            f"{sum(1 for p in panels for t in p['targets'] if t['series'])} of "
            f"{sum(len(p['targets']) for p in panels)} targets with data")
        ok = True
    finally:
        if operator:
            operator.stop()
        prom.stop(keep=not ok)
        if not ok:
            log(f"Prometheus's data and log kept in {prom.dir}; the operator's log: {WORK}/operator.log")
        otlp.stop()
        kubectl("delete", "sidecarset", "web-proxy", "batch-agent", "--ignore-not-found", check=False)
        kubectl("delete", "namespace", NS, "--wait=false", "--ignore-not-found", check=False)


if __name__ == "__main__":
    main()
