"""deploy/: every YAML file parses (PyYAML); docker-compose and the Kubernetes manifests have
the structure the brief asks for; every dgpu configuration shipped in them (compose config
files, ConfigMaps) uses only keys of the reference configs (configs/*.yaml list every key) and
is accepted by the real daemon (started with addresses and paths moved to a temporary
directory and free ports, certificates and tokens made there by scripts/make-dev-certs.sh and
make-token.sh; a bad config makes it exit at once with a one-line reason). The shipped configs
turn on TLS with client certificates and bearer tokens; the test checks that they do.

Not checked here, because nothing on the build machine can: that the images build, that
compose starts, that the manifests apply (no Docker engine, no Kubernetes cluster)."""

import copy
import glob
import subprocess
import os
import shutil
import tempfile
import time
import unittest

from ops_util import DEPLOY, REPO, harness, require_yaml


def key_paths(doc, prefix=""):
    """Dotted paths of every mapping key (lists and scalars are leaves)."""
    out = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            p = prefix + str(k)
            out.add(p)
            out |= key_paths(v, p + ".")
    return out


class DeployFilesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="dgpu-ops-deploy-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.yaml = require_yaml(self)

    def load(self, *parts):
        with open(os.path.join(DEPLOY, *parts)) as f:
            return list(self.yaml.safe_load_all(f))

    def reference(self, kind):
        with open(os.path.join(REPO, "configs", kind + ".yaml")) as f:
            return key_paths(self.yaml.safe_load(f))

    # -- every file -----------------------------------------------------------------------------

    def test_all_yaml_parses(self):
        files = sorted(glob.glob(os.path.join(DEPLOY, "**", "*.y*ml"), recursive=True))
        self.assertGreaterEqual(len(files), 10)
        for path in files:
            with self.subTest(file=os.path.relpath(path, REPO)):
                with open(path) as f:
                    docs = [d for d in self.yaml.safe_load_all(f) if d is not None]
                self.assertTrue(docs)

    # -- docker-compose -----------------------------------------------------------------------

    def compose(self):
        (doc,) = self.load("docker", "docker-compose.yml")
        return doc

    def test_compose_structure(self):
        doc = self.compose()
        self.assertLessEqual({"services", "volumes"}, set(doc))
        services = doc["services"]
        self.assertEqual(set(services),
                         {"scheduler-primary", "scheduler-standby", "agent-1", "agent-2"})
        for name, svc in services.items():
            with self.subTest(service=name):
                # YAML merge keys (<<) are resolved by the loader.
                self.assertIn("image", svc)
                build = svc["build"]
                dockerfile = os.path.normpath(os.path.join(
                    DEPLOY, "docker", build["context"], build["dockerfile"]))
                self.assertTrue(os.path.isfile(dockerfile), dockerfile)
                self.assertEqual(svc["stop_signal"], "SIGTERM")
                mounts = [v.split(":") for v in svc["volumes"]]
                configs = [m[0] for m in mounts if m[1].startswith("/etc/dgpu/")]
                self.assertEqual(len(configs), 1)
                self.assertTrue(os.path.isfile(os.path.join(DEPLOY, "docker", configs[0])))
                # Certificates and tokens (deploy/README.md makes them), read-only.
                self.assertIn(["./secrets", "/etc/dgpu-secrets", "ro"], mounts)
                for m in mounts:
                    if not m[0].startswith("."):
                        self.assertIn(m[0], doc["volumes"])

    def compose_config(self, service):
        svc = self.compose()["services"][service]
        src = [v.split(":")[0] for v in svc["volumes"] if ":/etc/dgpu/" in v][0]
        with open(os.path.join(DEPLOY, "docker", src)) as f:
            return self.yaml.safe_load(f)

    def test_compose_replication_and_agents(self):
        p = self.compose_config("scheduler-primary")
        s = self.compose_config("scheduler-standby")
        self.assertEqual(p["scheduler"]["role"], "master")
        self.assertEqual(s["scheduler"]["role"], "standby")
        self.assertTrue(p["replication"]["enabled"] and s["replication"]["enabled"])
        self.assertEqual(p["replication"]["peer_address"], "scheduler-standby:9090")
        self.assertEqual(s["replication"]["peer_address"], "scheduler-primary:9090")
        for a in ("agent-1", "agent-2"):
            c = self.compose_config(a)
            self.assertEqual(c["gpu"]["detection_method"], "fake")
            self.assertEqual(c["scheduler"]["master_address"], "scheduler-primary:9090")
            self.assertEqual(c["scheduler"]["standby_address"], "scheduler-standby:9090")

    # -- Kubernetes ---------------------------------------------------------------------------

    def k8s(self):
        objs = []
        for path in sorted(glob.glob(os.path.join(DEPLOY, "k8s", "*.yaml"))):
            for d in self.load("k8s", os.path.basename(path)):
                if d is not None and d.get("kind") != "Kustomization":
                    objs.append(d)
        return {(o["kind"], o["metadata"]["name"]): o for o in objs}

    def test_k8s_manifests(self):
        objs = self.k8s()
        for (kind, name), o in objs.items():
            with self.subTest(object="%s/%s" % (kind, name)):
                self.assertIn("apiVersion", o)
                if kind != "Namespace":
                    self.assertEqual(o["metadata"]["namespace"], "dgpu")
        (kust,) = self.load("k8s", "kustomization.yaml")
        listed = set(kust["resources"])
        on_disk = {os.path.basename(p) for p in glob.glob(os.path.join(DEPLOY, "k8s", "*.yaml"))}
        self.assertEqual(listed, on_disk - {"kustomization.yaml"})

        sts = objs[("StatefulSet", "dgpu-scheduler")]
        pod = sts["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        ports = {p["containerPort"] for p in c["ports"]}
        self.assertEqual(ports, {8080, 9090})
        self.assertEqual(c["readinessProbe"]["httpGet"]["path"], "/readyz")
        (claim,) = sts["spec"]["volumeClaimTemplates"]
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        self.assertEqual(mounts[claim["metadata"]["name"]], "/var/lib/dgpu-scheduler")
        self.assertIn("requests", c["resources"])
        for svc in ("dgpu-scheduler", "dgpu-scheduler-api"):
            ports = {p["port"] for p in objs[("Service", svc)]["spec"]["ports"]}
            self.assertEqual(ports, {8080, 9090})
        self.assertEqual(objs[("Service", "dgpu-scheduler")]["spec"]["clusterIP"], "None")

        ds = objs[("DaemonSet", "dgpu-agent")]
        pod = ds["spec"]["template"]["spec"]
        self.assertEqual(pod["nodeSelector"], {"nvidia.com/gpu.present": "true"})
        self.assertFalse(pod.get("hostPID", False))
        (c,) = pod["containers"]
        self.assertIn("requests", c["resources"])
        work = [v for v in pod["volumes"] if v["name"] == "work"][0]
        self.assertIn("hostPath", work)
        self.assertIn("/var/lib/dgpu-agent",
                      [m["mountPath"] for m in c["volumeMounts"] if m["name"] == "work"])

    def k8s_configs(self):
        objs = self.k8s()
        out = {}
        for name in ("dgpu-scheduler", "dgpu-agent"):
            for key, text in objs[("ConfigMap", name)]["data"].items():
                out[key] = self.yaml.safe_load(text)
        return out

    # -- the dgpu configs shipped in deploy/ ----------------------------------------------------

    def shipped_configs(self):
        """(label, kind, config) of every dgpu config under deploy/."""
        out = []
        for service in ("scheduler-primary", "scheduler-standby", "agent-1", "agent-2"):
            kind = "scheduler" if service.startswith("scheduler") else "agent"
            out.append(("compose " + service, kind, self.compose_config(service)))
        for key, cfg in self.k8s_configs().items():
            kind = "scheduler" if key.startswith("scheduler") else "agent"
            out.append(("k8s " + key, kind, cfg))
        return out

    def test_configs_use_known_keys(self):
        refs = {k: self.reference(k) for k in ("scheduler", "agent")}
        # The reference lists ha.election only in a comment.
        refs["scheduler"].add("ha.election")
        for label, kind, cfg in self.shipped_configs():
            with self.subTest(config=label):
                self.assertLessEqual(key_paths(cfg), refs[kind])

    def secrets(self):
        """Certificates (agents node-1, agent-1, agent-2) and a tokens file in the temporary
        directory, made by the scripts the deploy README names."""
        d = os.path.join(self.tmp, "secrets")
        if not os.path.isdir(d):
            subprocess.run([os.path.join(REPO, "scripts", "make-dev-certs.sh"), "-o", d,
                            "--agent", "node-1", "--agent", "agent-1", "--agent", "agent-2"],
                           check=True, capture_output=True, timeout=60)
            subprocess.run([os.path.join(REPO, "scripts", "make-token.sh"), "-f",
                            os.path.join(d, "tokens.yaml"), "ops", "admin"], check=True,
                           capture_output=True, timeout=30)
        return d

    def test_configs_turn_on_tls_and_tokens(self):
        for label, kind, cfg in self.shipped_configs():
            with self.subTest(config=label):
                if kind == "scheduler":
                    self.assertEqual(set(cfg["server"]["tls"]),
                                     {"cert_file", "key_file", "client_ca_file"})
                    self.assertEqual(set(cfg["replication"]["tls"]),
                                     {"ca_file", "cert_file", "key_file"})
                    self.assertEqual(cfg["auth"]["mode"], "token")
                    self.assertNotIn("allow_insecure_remote", cfg["auth"])
                else:
                    tls = cfg["scheduler"]["tls"]
                    self.assertEqual(set(tls), {"ca_file", "cert_file", "key_file"})
                    # The certificate of this very node.
                    self.assertIn("agent-" + cfg["agent"]["id"] + ".crt", tls["cert_file"])

    def test_daemons_accept_the_configs(self):
        for b in (harness.SCHEDULER_BIN, harness.AGENT_BIN):
            if not os.access(b, os.X_OK):
                if os.environ.get("DGPU_BIN_DIR"):
                    self.fail("binary not built: %s" % b)
                self.skipTest("binary not built: %s (set DGPU_BIN_DIR)" % b)
        for i, (label, kind, cfg) in enumerate(self.shipped_configs()):
            with self.subTest(config=label):
                cfg = copy.deepcopy(cfg)
                d = os.path.join(self.tmp, "cfg-%d" % i)
                os.makedirs(d)
                # Same keys and values, except where the daemon must listen, store and connect.
                secrets = self.secrets()
                if kind == "scheduler":
                    cfg["server"].update(grpc_address="127.0.0.1:%d" % harness.free_port(),
                                         http_address="127.0.0.1:%d" % harness.free_port())
                    for tls in (cfg["server"].get("tls"), cfg.get("replication", {}).get("tls")):
                        for k, v in (tls or {}).items():
                            tls[k] = os.path.join(secrets, os.path.basename(v))
                    if cfg.get("auth", {}).get("tokens_file"):
                        cfg["auth"]["tokens_file"] = os.path.join(secrets, "tokens.yaml")
                    cfg["storage"]["snapshot_dir"] = os.path.join(d, "state")
                    if cfg.get("replication", {}).get("enabled"):
                        cfg["replication"]["peer_address"] = "127.0.0.1:%d" % harness.free_port()
                    binary = harness.SCHEDULER_BIN
                else:
                    port = harness.free_port()
                    cfg["scheduler"]["master_address"] = "127.0.0.1:%d" % port
                    if cfg["scheduler"].get("standby_address"):
                        cfg["scheduler"]["standby_address"] = "127.0.0.1:%d" % (port + 1)
                    cfg["executor"]["work_dir"] = os.path.join(d, "work")
                    if cfg["gpu"]["detection_method"] != "fake":
                        cfg["gpu"]["detection_method"] = "fake"  # no GPU on the build machine
                    if cfg["agent"].get("id") == "__NODE_NAME__":
                        cfg["agent"]["id"] = "node-1"
                    for k, v in (cfg["scheduler"].get("tls") or {}).items():
                        name = os.path.basename(v).replace("__NODE_NAME__", "node-1")
                        cfg["scheduler"]["tls"][k] = os.path.join(secrets, name)
                    binary = harness.AGENT_BIN
                path = os.path.join(d, "config.yaml")
                with open(path, "w") as f:
                    self.yaml.safe_dump(cfg, f)
                daemon = harness.Daemon("daemon", [binary, "--config", path], d).start()
                try:
                    time.sleep(1.0)
                    self.assertTrue(daemon.running(), "%s exited with %s:\n%s" % (
                        label, daemon.proc.poll(), daemon.log_tails()))
                finally:
                    daemon.kill_all()
                    if binary == harness.AGENT_BIN:
                        harness.remove_agent_cgroups(cfg["agent"]["id"],
                                                     cfg["executor"]["work_dir"])


if __name__ == "__main__":
    unittest.main()
