"""Reads one VM through proxmoxer, a Proxmox VE client banlieue did not write.

proxmoxer.ReadVM (proxmoxer.go) runs this with Debian's /usr/bin/python3 and
python3-proxmoxer against the simulator, and the tests check what it prints: one JSON
object, read with the API token:

- "tags", "description", "net0": from the VM's config;
- "status", "pid": from its current status;
- "hardware": its CPU, memory and hotplug keys (HARDWARE) as GET config answers them,
  pending changes in; "current": the same as the VM runs them (current=1);
- "pending": the keys GET pending shows a pending value for, with that value, and
  "pending_delete" the keys it shows pending deletion.

Usage: read_vm.py --host H --port P --ca CA.pem --node NODE --vmid VMID,
with PVE_TOKEN_ID (user@realm!name) and PVE_TOKEN_SECRET in the environment.
"""

import argparse
import json
import os

from proxmoxer import ProxmoxAPI

HARDWARE = ("hotplug", "cores", "sockets", "vcpus", "numa", "memory")


def strings(conf):
    """The HARDWARE keys of a config that has them, as strings."""
    return {k: str(conf[k]) for k in HARDWARE if k in conf}


def main():
    p = argparse.ArgumentParser()
    for flag in ("--host", "--port", "--ca", "--node", "--vmid"):
        p.add_argument(flag, required=True)
    args = p.parse_args()
    user, token_name = os.environ["PVE_TOKEN_ID"].split("!", 1)
    px = ProxmoxAPI(args.host, port=args.port, user=user, token_name=token_name,
                    token_value=os.environ["PVE_TOKEN_SECRET"], verify_ssl=args.ca, timeout=10)
    vm = px.nodes(args.node).qemu(args.vmid)
    conf = vm.config.get()
    current = vm.config.get(current=1)
    pending = vm.pending.get()
    status = vm.status.current.get()
    print(json.dumps({
        "tags": conf.get("tags", ""),
        "description": conf.get("description", ""),
        "net0": conf.get("net0", ""),
        "status": status.get("status", ""),
        "pid": status.get("pid", 0),
        "hardware": strings(conf),
        "current": strings(current),
        "pending": {i["key"]: str(i["pending"]) for i in pending if "pending" in i},
        "pending_delete": sorted(i["key"] for i in pending if i.get("delete")),
    }))


if __name__ == "__main__":
    main()
