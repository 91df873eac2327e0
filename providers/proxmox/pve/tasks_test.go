package pve

import "testing"

// A UPID names its node, and a qmdestroy task's the VM it destroys; anything else is
// no destroyed VM, and a string that is no UPID has no node.
func TestUPIDFields(t *testing.T) {
	for _, tc := range []struct {
		upid     string
		node     string
		vmid     int
		destroys bool
	}{
		{"UPID:pve1:0000A1B2:0001C3D4:6751F2A0:qmdestroy:101:root@pam:", "pve1", 101, true},
		{"UPID:pve2:0000A1B2:0001C3D4:6751F2A0:qmclone:9000:root@pam:", "pve2", 0, false},
		{"UPID:pve1:0000A1B2:0001C3D4:6751F2A0:qmdestroy::root@pam:", "pve1", 0, false},
		{"UPID:pve1:0000A1B2:0001C3D4:6751F2A0:qmdestroy:0:root@pam:", "pve1", 0, false},
		{"UPID:pve1:qmdestroy:101", "", 0, false},
		{"TASK:pve1:0000A1B2:0001C3D4:6751F2A0:qmdestroy:101:root@pam:", "", 0, false},
		{"", "", 0, false},
	} {
		if got := UPIDNode(tc.upid); got != tc.node {
			t.Errorf("UPIDNode(%q) = %q, want %q", tc.upid, got, tc.node)
		}
		node, vmid, ok := DestroyedVM(tc.upid)
		if ok != tc.destroys || (ok && (node != tc.node || vmid != tc.vmid)) {
			t.Errorf("DestroyedVM(%q) = %q, %d, %t; want %q, %d, %t", tc.upid, node, vmid, ok, tc.node, tc.vmid, tc.destroys)
		}
	}
}
