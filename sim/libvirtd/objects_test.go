package libvirtd

import (
	"slices"
	"strings"
	"testing"
)

// TestATakenSubnetIsDrawnAgain takes a subnet with one network, then has
// DefineTestNetwork draw that subnet first: it must start its network on the next draw,
// and leave nothing defined when every draw is taken.
func TestATakenSubnetIsDrawnAgain(t *testing.T) {
	d := StartT(t, Options{})
	taken, err := d.DefineTestNetwork("taken", "bnlt")
	if err != nil {
		t.Fatal(err)
	}
	free := randomSubnet()
	for free == taken {
		free = randomSubnet()
	}
	draws := func(subnets ...string) {
		drawSubnet = func() string {
			s := subnets[0]
			if len(subnets) > 1 {
				subnets = subnets[1:]
			}
			return s
		}
	}
	t.Cleanup(func() { drawSubnet = randomSubnet })

	draws(taken, free)
	got, err := d.DefineTestNetwork("second", "bnlt")
	if err != nil {
		t.Fatalf("DefineTestNetwork after a taken draw: %v", err)
	}
	if got != free {
		t.Errorf("DefineTestNetwork = %s, want the second draw %s", got, free)
	}

	draws(taken)
	if _, err := d.DefineTestNetwork("third", "bnlt"); err == nil || !strings.Contains(err.Error(), "already in use") {
		t.Errorf("DefineTestNetwork with every draw taken: err = %v, want libvirt's \"already in use\"", err)
	}
	l, err := d.Connect("qemu:///system")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Disconnect() }()
	nets, _, err := l.ConnectListAllNetworks(-1, 0)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(nets))
	for _, n := range nets {
		names = append(names, n.Name)
	}
	slices.Sort(names)
	if want := []string{"second", "taken"}; !slices.Equal(names, want) {
		t.Errorf("networks = %v, want %v: a refused draw leaves no definition behind", names, want)
	}
}
