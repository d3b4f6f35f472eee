#!/usr/bin/env python3
"""Records a SidecarSet rollout over time, for the rollout picture of the docs site.

On the cluster of KUBECONFIG, with the operator running (`make cluster-up`, `make run`): a
Deployment of PODS pods (default 200) in a namespace of its own, a SidecarSet injecting a
sidecar into them (RollingUpdate, maxUnavailable 10 %), then the sidecar's image changed; every
half second (from a watch of the pods) until every pod runs the new image and is Ready (or TIMEOUT seconds), it counts the
pods whose sidecar is the new image in their spec (updated) and those of them Ready with the new
image running (updated and ready). Writes the samples as CSV (seconds,updated,ready,total) to
docs/src/pictures/data/rollout-kwok.csv, with the run's circumstances in comment lines;
`hack/pictures.py write` draws the picture from it. Cleans up what it created.

  hack/record-rollout.py [PODS] [TIMEOUT]
"""

import datetime
import json
import os
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "docs/src/pictures/data/rollout-kwok.csv")
NS = "sso-rollout-picture"
SS = "sso-rollout-picture"
KUBECTL = os.environ.get("KUBECTL") or (
    os.path.join(REPO, ".local/bin/kubectl")
    if os.path.exists(os.path.join(REPO, ".local/bin/kubectl"))
    else "kubectl"
)


def kubectl(*args, stdin=None):
    r = subprocess.run([KUBECTL, *args], input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def sidecarset(image):
    return json.dumps({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "SidecarSet",
        "metadata": {"name": SS},
        "spec": {
            "namespace": NS,
            "selector": {"matchLabels": {"app": "rollout-picture"}},
            "updateStrategy": {"type": "RollingUpdate", "maxUnavailable": "10%"},
            "containers": [{"name": "proxy", "image": image, "command": ["sleep", "infinity"]}],
        },
    })


def state(p, image):
    """(updated, ready) of one pod: its sidecar is `image` in its spec; and it runs and is Ready."""
    spec = {c["name"]: c.get("image") for c in p["spec"]["containers"]}
    if spec.get("proxy") != image:
        return False, False
    status = {c["name"]: c for c in p.get("status", {}).get("containerStatuses", [])}
    running = status.get("proxy", {}).get("image", "").endswith(image.split("/")[-1])
    conds = {c["type"]: c["status"] for c in p.get("status", {}).get("conditions", [])}
    return True, running and conds.get("Ready") == "True"


def counts(image):
    pods = json.loads(kubectl("-n", NS, "get", "pods", "-o", "json"))["items"]
    s = [state(p, image) for p in pods]
    return sum(u for u, _ in s), sum(r for _, r in s), len(pods)


class Watch:
    """The namespace's pods as a watch (kubectl get -w) reports them, kept in memory."""

    def __init__(self):
        self.pods = {}
        self.lock = threading.Lock()
        self.proc = subprocess.Popen([KUBECTL, "-n", NS, "get", "pods", "-w", "-o", "json"],
                                     stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        dec, buf = json.JSONDecoder(), ""
        for line in self.proc.stdout:
            buf += line
            while True:
                buf = buf.lstrip()
                try:
                    obj, end = dec.raw_decode(buf)
                except ValueError:
                    break
                buf = buf[end:]
                with self.lock:
                    self.pods[obj["metadata"]["name"]] = obj

    def counts(self, image):
        with self.lock:
            s = [state(p, image) for p in self.pods.values()]
        return sum(u for u, _ in s), sum(r for _, r in s), len(s)

    def stop(self):
        self.proc.kill()


def main():
    pods = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    timeout = float(sys.argv[2]) if len(sys.argv) > 2 else 300
    while subprocess.run([KUBECTL, "get", "namespace", NS], capture_output=True).returncode == 0:
        time.sleep(1)  # a namespace of an earlier run, still being deleted
    kubectl("create", "namespace", NS)
    try:
        kubectl("apply", "-f", "-", stdin=sidecarset("registry.local/proxy:1.0"))
        labels = {"app": "rollout-picture"}
        kubectl("-n", NS, "apply", "-f", "-", stdin=json.dumps({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "app"},
            "spec": {"replicas": pods, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                         {"name": "app", "image": "registry.local/app:1.0"}]}}}}))
        deadline = time.time() + timeout
        while True:
            u, r, t = counts("registry.local/proxy:1.0")
            if t >= pods and r == pods:
                break
            if time.time() > deadline:
                sys.exit(f"the pods did not get ready with the first sidecar: {r}/{pods}")
            time.sleep(1)
        new = "registry.local/proxy:2.0"
        watch = Watch()
        while watch.counts(new)[2] < pods:
            time.sleep(0.2)
        start = time.time()
        kubectl("apply", "-f", "-", stdin=sidecarset(new))
        rows = []
        while True:
            u, r, t = watch.counts(new)
            rows.append((time.time() - start, u, r, t))
            if r == pods or time.time() - start > timeout:
                break
            time.sleep(0.5)
        watch.stop()
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        server = kubectl("version", "-o", "json")
        server = json.loads(server).get("serverVersion", {}).get("gitVersion", "?")
        os.makedirs(os.path.dirname(OUT), exist_ok=True)
        with open(OUT, "w") as f:
            f.write(f"# hack/record-rollout.py {pods}: {datetime.date.today()}, commit {commit}, "
                    f"kube-apiserver {server} with kwok nodes (make cluster-up), operator as a local "
                    f"process (make run); maxUnavailable 10 %\n")
            f.write("seconds,updated,ready,total\n")
            for s, u, r, t in rows:
                f.write(f"{s:.1f},{u},{r},{t}\n")
        print(f"wrote {OUT}: {len(rows)} samples, {rows[-1][0]:.1f} s to {rows[-1][2]}/{pods} ready")
    finally:
        subprocess.run([KUBECTL, "delete", "sidecarset", SS, "--ignore-not-found"], capture_output=True)
        subprocess.run([KUBECTL, "delete", "namespace", NS, "--wait=false"], capture_output=True)


if __name__ == "__main__":
    main()
