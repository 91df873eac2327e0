"""Reads a NoCloud seed with cloud-init's own code and prints what it read, as JSON.

Usage: python3 -I cloudinit_read.py DIST_PACKAGES SEED_DIR

DIST_PACKAGES is the dist-packages directory of Debian's cloud-init package, unpacked
(not installed) by hack/deps.sh; SEED_DIR holds the seed's files, extracted from its
ISO. The seed is read twice, as the NoCloud data source reads it on a guest:

- "seed_dir": from a seed directory, by the code that reads a mounted cidata
  filesystem (util.pathprefix2dict, then the data source's merge): meta-data,
  user-data and network-config;
- "seedfrom": from seedfrom=file://SEED_DIR/ (util.read_seeded): meta-data and
  user-data.

The network-config is then parsed into cloud-init's network state and rendered as
/etc/network/interfaces. Nothing outside a scratch directory is read or written:
the DMI serial and the kernel command line (where NoCloud also looks) read as empty,
and the cidata label is not searched for, so no block device is probed or mounted.
"""

import base64
import json
import os
import sys
import tempfile

sys.path.insert(0, sys.argv[1])

from cloudinit import helpers, util  # noqa: E402
from cloudinit.net import eni, network_state  # noqa: E402
from cloudinit.sources import DataSourceNoCloud  # noqa: E402

# This host's DMI serial and kernel command line are not the guest's.
DataSourceNoCloud.dmi.read_dmi_data = lambda key: None
util.get_cmdline = lambda: ""


def read(seed_dir, ds_cfg, scratch):
    """Reads the seed as a NoCloud data source whose cloud_dir is scratch."""
    ds_cfg = dict(ds_cfg, fs_label=None)
    paths = helpers.Paths(
        {"cloud_dir": scratch, "run_dir": os.path.join(scratch, "run")}
    )
    ds = DataSourceNoCloud.DataSourceNoCloud(
        {"datasource": {"NoCloud": ds_cfg}}, None, paths
    )
    # _get_data is the reading; get_data would also write instance-data.json.
    if not ds._get_data():
        raise SystemExit("NoCloud found no seed in " + seed_dir)
    return ds


def main():
    seed = sys.argv[2]
    with tempfile.TemporaryDirectory() as scratch:
        os.makedirs(os.path.join(scratch, "a", "seed"))
        os.symlink(seed, os.path.join(scratch, "a", "seed", "nocloud"))
        os.makedirs(os.path.join(scratch, "b"))
        by_dir = read(seed, {}, os.path.join(scratch, "a"))
        by_url = read(
            seed, {"seedfrom": "file://" + seed + "/"}, os.path.join(scratch, "b")
        )

    out = {}
    for name, ds in (("seed_dir", by_dir), ("seedfrom", by_url)):
        out[name] = {
            "instance_id": ds.get_instance_id(),
            "meta_data": ds.metadata,
            "user_data": None
            if ds.userdata_raw is None
            else base64.b64encode(ds.userdata_raw).decode(),
        }
    cfg = by_dir.network_config
    out["seed_dir"]["network_config"] = cfg
    if cfg is not None:
        state = network_state.parse_net_config_data(cfg, skip_broken=False)
        out["network_state"] = {
            "interfaces": list(state.iter_interfaces()),
            "routes": list(state.iter_routes()),
            "nameservers": state.dns_nameservers,
        }
        out["eni"] = eni.network_state_to_eni(state, render_hwaddress=True)
    json.dump(out, sys.stdout, indent=1, sort_keys=True)


main()
