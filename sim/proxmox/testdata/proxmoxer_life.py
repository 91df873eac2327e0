"""A whole VM life through proxmoxer, a Proxmox VE client banlieue did not write.

proxmoxer_test.go runs this with Debian's /usr/bin/python3 and python3-proxmoxer
against the simulator, once with a ticket (user and password) and once with an API
token. It prints one JSON object a line per step, {"step", "ok", "detail"}, and
exits 0 when every step passed. A failed step of the VM's life ends the life (the
later steps depend on it); the error probes run whatever happened before, once
logged in.

Usage: proxmoxer_life.py --auth ticket|token --host H --port P --ca CA.pem
  --node NODE --template VMID, with PVE_USER, PVE_PASSWORD, PVE_TOKEN_ID
  (user@realm!name) and PVE_TOKEN_SECRET in the environment.
"""

import argparse
import json
import os
import sys
import time
import traceback

import requests
from proxmoxer import ProxmoxAPI
from proxmoxer.backends.https import AuthenticationError
from proxmoxer.core import ResourceException

# How long a task or the guest agent may take before the step fails.
TIMEOUT = 30

# The clone's name, and the address its ipconfig0 gives it, which the guest agent
# must report once the VM runs.
NAME = "proxmoxer-life"
ADDRESS = "10.20.0.5"


class StepFailed(Exception):
    """A step's assertion failed; the message says what was expected and seen."""


def check(cond, fmt, *args):
    if not cond:
        raise StepFailed(fmt.format(*args))


def report(step, ok, detail):
    print(json.dumps({"step": step, "ok": ok, "detail": detail}), flush=True)
    return ok


def run(step, fn):
    """Runs one step and reports it; returns whether it passed."""
    try:
        detail = fn()
    except StepFailed as e:
        return report(step, False, str(e))
    except (ResourceException, AuthenticationError, requests.RequestException) as e:
        return report(step, False, "{}: {}".format(type(e).__name__, e))
    except Exception:  # a bug of the script's or proxmoxer's: the whole traceback
        return report(step, False, traceback.format_exc())
    return report(step, True, detail or "")


def connect(args, auth=None, secret=None):
    """A client as its users make one, the simulator's CA as requests' CA bundle:
    with a ticket (auth "ticket") or an API token (auth "token"), args.auth by
    default; secret replaces the password or the token's secret."""
    common = dict(host=args.host, port=args.port, verify_ssl=args.ca, timeout=10)
    if (auth or args.auth) == "ticket":
        return ProxmoxAPI(user=os.environ["PVE_USER"], password=secret or os.environ["PVE_PASSWORD"], **common)
    user, token_name = os.environ["PVE_TOKEN_ID"].split("!", 1)
    return ProxmoxAPI(user=user, token_name=token_name, token_value=secret or os.environ["PVE_TOKEN_SECRET"], **common)


def wait_task(px, upid):
    """Waits for a task as PVE's clients do, on the node its UPID names, and returns
    its exit status."""
    check(isinstance(upid, str) and upid.startswith("UPID:"), "expected a UPID, got {!r}", upid)
    node = upid.split(":")[1]
    deadline = time.monotonic() + TIMEOUT
    while True:
        st = px.nodes(node).tasks(upid).status.get()
        if st["status"] == "stopped":
            return st.get("exitstatus")
        check(st["status"] == "running", "task {} has status {!r}", upid, st["status"])
        check(time.monotonic() < deadline, "task {} still running after {}s", upid, TIMEOUT)
        time.sleep(0.05)


def task_ok(px, upid):
    status = wait_task(px, upid)
    check(status == "OK", "task {} ended {!r}, not OK", upid, status)
    return upid


def error_of(call):
    """Runs a call that must fail and returns proxmoxer's ResourceException."""
    try:
        got = call()
    except ResourceException as e:
        return e
    raise StepFailed("expected an error, got {!r}".format(got))


class Life:
    """The VM's life, step by step; each step returns a line of detail."""

    def __init__(self, args):
        self.args = args
        self.px = self.node = self.vmid = None

    @property
    def vm(self):
        return self.node.qemu(self.vmid)

    def login(self):
        self.px = connect(self.args)
        self.node = self.px.nodes(self.args.node)
        version = self.px.version.get()
        check(version["release"].startswith("8."), "PVE release {!r}, want 8.x", version["release"])
        ticket, csrf = self.px.get_tokens()
        if self.args.auth == "ticket":
            check(ticket.startswith("PVE:" + os.environ["PVE_USER"] + ":"), "ticket {!r}", ticket)
            check(csrf, "no CSRF prevention token")
        return "PVE {}".format(version["version"])

    def nextid(self):
        self.vmid = int(self.px.cluster.nextid.get())
        taken = {int(v["vmid"]) for v in self.node.qemu.get()}
        check(self.vmid >= 100 and self.vmid not in taken, "nextid {} is taken ({})", self.vmid, sorted(taken))
        return "VMID {}".format(self.vmid)

    def clone(self):
        upid = self.node.qemu(self.args.template).clone.post(newid=self.vmid, name=NAME, full=1)
        task_ok(self.px, upid)
        conf = self.vm.config.get()
        check(conf.get("name") == NAME, "name {!r}", conf.get("name"))
        check("template" not in conf, "the clone is a template: {!r}", conf.get("template"))
        disk = conf["scsi0"].split(",")[0]
        check(disk.endswith(":vm-{}-disk-0".format(self.vmid)), "scsi0 {!r} is not a full copy", conf["scsi0"])
        return "{} by {}".format(conf["scsi0"], upid)

    def config_sync(self):
        got = self.vm.config.put(cores=4, memory=4096, description="set by proxmoxer")
        check(got is None, "PUT config answered {!r}, not null", got)
        conf = self.vm.config.get()
        check(str(conf["cores"]) == "4" and str(conf["memory"]) == "4096",
              "cores {!r}, memory {!r}", conf["cores"], conf["memory"])
        check(conf.get("description") == "set by proxmoxer", "description {!r}", conf.get("description"))
        return "cores 4, memory 4096"

    def config_async(self):
        ipconfig = "ip={}/24,gw=10.20.0.1".format(ADDRESS)
        before = self.vm.config.get()["digest"]
        upid = self.vm.config.post(ipconfig0=ipconfig, tags="proxmoxer;life", digest=before)
        task_ok(self.px, upid)
        conf = self.vm.config.get()
        check(conf.get("ipconfig0") == ipconfig, "ipconfig0 {!r}", conf.get("ipconfig0"))
        check(conf.get("tags") == "proxmoxer;life", "tags {!r}", conf.get("tags"))
        check(conf["digest"] != before, "the digest did not change")
        return "ipconfig0 {} by {}".format(ipconfig, upid)

    def resize(self):
        upid = self.vm.resize.put(disk="scsi0", size="+2G")
        task_ok(self.px, upid)
        scsi0 = self.vm.config.get()["scsi0"]
        check("size=12G" in scsi0.split(","), "scsi0 {!r} after +2G on 10G", scsi0)
        return scsi0

    def start(self):
        task_ok(self.px, self.vm.status.start.post())
        return "started"

    def status(self):
        st = self.vm.status.current.get()
        want = {"status": "running", "qmpstatus": "running", "name": NAME, "cpus": 4,
                "maxmem": 4096 << 20, "agent": 1}
        got = {k: st.get(k) for k in want}
        check(got == want, "status/current {!r}, want {!r}", got, want)
        check(int(st["vmid"]) == self.vmid, "vmid {!r}", st["vmid"])
        check(st.get("pid", 0) > 0, "pid {!r}", st.get("pid"))
        return "running, pid {}".format(st["pid"])

    def agent(self):
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                ifaces = self.vm.agent("network-get-interfaces").get()["result"]
                break
            except ResourceException as e:
                check(e.status_code == 500 and "guest agent is not running" in str(e), "agent: {}", e)
                check(time.monotonic() < deadline, "the agent did not answer in {}s", TIMEOUT)
                time.sleep(0.1)
        mac = self.vm.config.get()["net0"].split(",")[0].split("=")[1].lower()
        eth = [i for i in ifaces if i.get("hardware-address", "").lower() == mac]
        check(len(eth) == 1, "no interface with net0's MAC {} in {!r}", mac, ifaces)
        addrs = [a["ip-address"] for a in eth[0]["ip-addresses"] if a["ip-address-type"] == "ipv4"]
        check(ADDRESS in addrs, "{} has {}, want {}", eth[0]["name"], addrs, ADDRESS)
        return "{} {} {}".format(eth[0]["name"], mac, ADDRESS)

    def shutdown(self):
        task_ok(self.px, self.vm.status.shutdown.post(timeout=30))
        st = self.vm.status.current.get()["status"]
        check(st == "stopped", "status {!r} after shutdown", st)
        return "stopped"

    def stop(self):
        task_ok(self.px, self.vm.status.start.post())
        st = self.vm.status.current.get()["status"]
        check(st == "running", "status {!r} after the second start", st)
        task_ok(self.px, self.vm.status.stop.post())
        st = self.vm.status.current.get()["status"]
        check(st == "stopped", "status {!r} after stop", st)
        return "started again, stopped"

    def delete(self):
        task_ok(self.px, self.vm.delete(purge=1))
        listed = [v["vmid"] for v in self.node.qemu.get() if int(v["vmid"]) == self.vmid]
        check(not listed, "VM {} is still listed", self.vmid)
        e = error_of(self.vm.status.current.get)
        check(e.status_code == 500, "status/current of the deleted VM: {}", e)
        check(int(self.px.cluster.nextid.get(vmid=self.vmid)) == self.vmid, "VMID {} is not free again", self.vmid)
        return "VM {} gone".format(self.vmid)

    STEPS = ["login", "nextid", "clone", "config_sync", "config_async", "resize", "start",
             "status", "agent", "shutdown", "stop", "delete"]


class Probes:
    """Errors as PVE answers them, which proxmoxer turns into ResourceException."""

    def __init__(self, args, px):
        self.args, self.px = args, px
        self.node = px.nodes(args.node)

    def unknown_path(self):
        e = error_of(self.node.frobnicate.get)
        check(e.status_code == 501, "GET /nodes/{}/frobnicate: {}", self.args.node, e)
        return str(e)

    def bad_parameter(self):
        tpl = self.node.qemu(self.args.template)
        e = error_of(lambda: tpl.config.put(cores="many"))
        # proxmoxer 1.2 looks for the complaints ({"errors": {"cores": …}}) inside
        # "data", which PVE sends as null, so the reason phrase is all it shows.
        check(e.status_code == 400 and "Parameter verification failed." in str(e), "PUT config cores=many: {}", e)
        cores = tpl.config.get()["cores"]
        check(str(cores) == "2", "the template's cores changed to {!r}", cores)
        return str(e)

    def bad_token(self):
        bad = connect(self.args, "token", "00000000-0000-0000-0000-000000000000")
        e = error_of(bad.version.get)
        check(e.status_code == 401, "GET /version with a bad token: {}", e)
        return str(e)

    def bad_password(self):
        try:
            connect(self.args, "ticket", "not-the-password")
        except AuthenticationError as e:
            return str(e)
        raise StepFailed("logged in with a wrong password")

    def missing_vm(self):
        vmid = 123
        e = error_of(self.node.qemu(vmid).config.get)
        want = "Configuration file 'nodes/{}/qemu-server/{}.conf' does not exist".format(self.args.node, vmid)
        check(e.status_code == 500 and want in str(e), "GET config of VM {}: {}, want 500 {}", vmid, e, want)
        return str(e)

    STEPS = ["unknown_path", "bad_parameter", "bad_token", "bad_password", "missing_vm"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--auth", choices=["ticket", "token"], required=True)
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--template", type=int, required=True)
    args = p.parse_args()

    life = Life(args)
    ok = True
    for step in Life.STEPS:
        if not run(step, getattr(life, step)):
            ok = False
            break
    if life.px is None:
        return 1  # not even logged in: the probes need a client
    probes = Probes(args, life.px)
    for step in Probes.STEPS:
        ok = run(step, getattr(probes, step)) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
