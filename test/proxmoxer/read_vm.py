"""Reads one VM through proxmoxer, a Proxmox VE client banlieue did not write.

proxmoxer.ReadVM (proxmoxer.go) runs this with Debian's /usr/bin/python3 and
python3-proxmoxer against the simulator, and the tests check what it prints: one JSON
object, {"tags", "description", "status", "pid", "net0"}, from the VM's config and
its current status, read with the API token.

Usage: read_vm.py --host H --port P --ca CA.pem --node NODE --vmid VMID,
with PVE_TOKEN_ID (user@realm!name) and PVE_TOKEN_SECRET in the environment.
"""

import argparse
import json
import os

from proxmoxer import ProxmoxAPI


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
    status = vm.status.current.get()
    print(json.dumps({
        "tags": conf.get("tags", ""),
        "description": conf.get("description", ""),
        "net0": conf.get("net0", ""),
        "status": status.get("status", ""),
        "pid": status.get("pid", 0),
    }))


if __name__ == "__main__":
    main()
