#!/usr/bin/env python3
"""Pod admissions in a loop, from several clients at once, counted: the load of the upgrade and
drain tests of hack/e2e-node.sh.

Each client keeps one HTTPS connection to the API server of KUBECONFIG and creates pods with
dryRun=All (each goes through the mutating pod webhook, failurePolicy Fail, as a real create does;
nothing is stored) at its share of --rate, until the file --stop exists. An admission counts as
failed when the API server refuses the pod or returns it without the container --expect (created
without the sidecar). At the end one JSON line on stdout:
  {"attempted": N, "failed": F, "seconds": S, "rate": R, "clients": C, "first_failures": [...]}
and every failure, with its time, in --failures.

  hack/admissions.py --namespace NS --labels app=demo --expect hello-sidecar --stop FILE
      [--clients 4] [--rate 80] [--failures FILE] [--image IMAGE]
"""
import argparse
import base64
import http.client
import json
import os
import ssl
import sys
import tempfile
import threading
import time
import urllib.parse

import yaml


def kube_context(path):
    cfg = yaml.safe_load(open(path))
    ctx_name = cfg.get("current-context")
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
    tmp = tempfile.mkdtemp(prefix="sso-admissions-")

    def file_of(d, key):
        if d.get(key + "-data"):
            p = os.path.join(tmp, key)
            with open(p, "wb") as f:
                f.write(base64.b64decode(d[key + "-data"]))
            return p
        return d.get(key)

    ssl_ctx = ssl.create_default_context(cafile=file_of(cluster, "certificate-authority"))
    if cluster.get("insecure-skip-tls-verify"):
        ssl_ctx.check_hostname = False
        ssl_ctx.verify_mode = ssl.CERT_NONE
    cert, key = file_of(user, "client-certificate"), file_of(user, "client-key")
    if cert:
        ssl_ctx.load_cert_chain(cert, key)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if user.get("token"):
        headers["Authorization"] = "Bearer " + user["token"]
    return urllib.parse.urlparse(cluster["server"]), ssl_ctx, headers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--labels", required=True, help="k=v[,k=v]")
    ap.add_argument("--expect", required=True, help="a container the admitted pod must have")
    ap.add_argument("--stop", required=True, help="stop once this file exists")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rate", type=float, default=80, help="admissions per second, over all clients")
    ap.add_argument("--failures", default=None)
    ap.add_argument("--image", default="localhost/sso-e2e/busybox:v1")
    ap.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    a = ap.parse_args()
    url, ssl_ctx, headers = kube_context(a.kubeconfig)
    labels = dict(kv.split("=", 1) for kv in a.labels.split(","))
    body = json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": "admission-load-", "labels": labels},
        "spec": {"containers": [{"name": "app", "image": a.image, "command": ["sleep", "1"]}]},
    }).encode()
    path = f"/api/v1/namespaces/{a.namespace}/pods?dryRun=All"
    lock = threading.Lock()
    counts = {"attempted": 0, "failed": 0}
    failures = []
    interval = a.clients / a.rate if a.rate > 0 else 0

    def fail(what):
        with lock:
            counts["failed"] += 1
            failures.append(f"{time.strftime('%H:%M:%S', time.gmtime())}.{int(time.time() * 1000) % 1000:03d} {what}")

    def client(i):
        conn = None
        nxt = time.monotonic() + interval * i / a.clients
        while not os.path.exists(a.stop):
            now = time.monotonic()
            if now < nxt:
                time.sleep(nxt - now)
            nxt = max(nxt + interval, time.monotonic() - interval)
            with lock:
                counts["attempted"] += 1
            try:
                if conn is None:
                    conn = http.client.HTTPSConnection(url.hostname, url.port or 443, context=ssl_ctx, timeout=30)
                conn.request("POST", path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except Exception as e:  # the connection to the API server itself: not an admission
                fail(f"client {i}: request to the API server failed: {e!r}")
                conn = None
                continue
            if resp.status != 201:
                try:
                    msg = json.loads(data).get("message", "")
                except ValueError:
                    msg = data[:200].decode(errors="replace")
                fail(f"client {i}: HTTP {resp.status}: {msg}")
                continue
            names = [c["name"] for c in json.loads(data)["spec"]["containers"]]
            if a.expect not in names:
                fail(f"client {i}: admitted without {a.expect}: containers {names}")

    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(a.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    if a.failures:
        with open(a.failures, "w") as f:
            f.writelines(x + "\n" for x in failures)
    print(json.dumps({"attempted": counts["attempted"], "failed": counts["failed"], "seconds": round(secs, 1),
                      "rate": round(counts["attempted"] / secs, 1) if secs else 0, "clients": a.clients,
                      "first_failures": failures[:5]}))


if __name__ == "__main__":
    sys.exit(main())
