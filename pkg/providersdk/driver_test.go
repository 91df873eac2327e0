package providersdk

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
)

func TestAdaptersDefaultToDoingNothing(t *testing.T) {
	ctx := context.Background()
	m := &Machine{UID: "u1"}
	for _, tc := range []struct {
		name   string
		client Client
	}{
		{"a ClientFns with no functions", ClientFns{}},
		{"the NopClient", NopClient{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obs, err := tc.client.Observe(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(Observation{}, obs); diff != "" {
				t.Errorf("observation (-want +got):\n%s", diff)
			}
			if _, err := tc.client.Create(ctx, m, obs); err != nil {
				t.Error(err)
			}
			if _, err := tc.client.Update(ctx, m, obs); err != nil {
				t.Error(err)
			}
			if _, err := tc.client.Delete(ctx, m, obs); err != nil {
				t.Error(err)
			}
			if err := tc.client.Disconnect(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestDriverFuncCallsItsFunction(t *testing.T) {
	var got ProviderInfo
	d := DriverFunc(func(_ context.Context, info ProviderInfo) (Client, error) {
		got = info
		return NopClient{}, nil
	})
	want := ProviderInfo{Credentials: map[string][]byte{"token": []byte("t")}}
	if _, err := d.Connect(context.Background(), want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("info (-want +got):\n%s", diff)
	}
}

func TestClientFnsHandsTheObservationOn(t *testing.T) {
	var created, updated, deleted Observation
	c := ClientFns{
		ObserveFn: func(context.Context, *Machine) (Observation, error) {
			return Observation{Exists: true, ProviderID: "x://1", State: "the VM handle"}, nil
		},
		CreateFn: func(_ context.Context, _ *Machine, o Observation) (CreateResult, error) {
			created = o
			return CreateResult{}, nil
		},
		UpdateFn: func(_ context.Context, _ *Machine, o Observation) (UpdateResult, error) {
			updated = o
			return UpdateResult{}, nil
		},
		DeleteFn: func(_ context.Context, _ *Machine, o Observation) (DeleteResult, error) {
			deleted = o
			return DeleteResult{}, nil
		},
	}
	ctx, m := context.Background(), &Machine{}
	obs, err := c.Observe(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Create(ctx, m, obs)
	_, _ = c.Update(ctx, m, obs)
	_, _ = c.Delete(ctx, m, obs)
	want := Observation{Exists: true, ProviderID: "x://1", State: "the VM handle"}
	for name, got := range map[string]Observation{"Create": created, "Update": updated, "Delete": deleted} {
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s's observation (-want +got):\n%s", name, diff)
		}
	}
}

func TestOptionalInterfacesDefaultWhenAClientLacksThem(t *testing.T) {
	ctx := context.Background()
	img := &Image{Name: "ubuntu", Source: banlieuev1.ImageSource{Ref: "tpl-ubuntu"}}
	for _, tc := range []struct {
		name      string
		client    Client
		inventory Inventory
		image     ImageResult
	}{
		{"a client with neither: no failure domains, the image as its source names it", NopClient{},
			Inventory{}, ImageResult{Ready: true, ResolvedRef: "tpl-ubuntu"}},
		{"a client with both: theirs", struct {
			ClientFns
			InventoryFunc
			ImageResolverFunc
		}{
			InventoryFunc: func(context.Context) (Inventory, error) {
				return Inventory{FailureDomains: []banlieuev1.FailureDomain{{Name: "rack-1"}}}, nil
			},
			ImageResolverFunc: func(_ context.Context, img *Image) (ImageResult, error) {
				return ImageResult{Ready: true, ResolvedRef: "vm-42/" + img.Name}, nil
			},
		}, Inventory{FailureDomains: []banlieuev1.FailureDomain{{Name: "rack-1"}}}, ImageResult{Ready: true, ResolvedRef: "vm-42/ubuntu"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := inventoryOf(ctx, tc.client)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.inventory, inv); diff != "" {
				t.Errorf("inventory (-want +got):\n%s", diff)
			}
			res, err := resolveImage(ctx, tc.client, img)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.image, res); diff != "" {
				t.Errorf("image (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNopsOfTheOptionalInterfaces(t *testing.T) {
	ctx := context.Background()
	var (
		_ InventoryReader      = NopInventoryReader{}
		_ ImageResolver        = NopImageResolver{}
		_ GuestAddressReporter = NopGuestAddressReporter{}
		_ GuestAddressReporter = GuestAddressReporterFunc(nil)
	)
	if got, err := (NopGuestAddressReporter{}).GuestsWithAddresses(ctx); err != nil || len(got) != 0 {
		t.Errorf("NopGuestAddressReporter = %v, %v; want none", got, err)
	}
	if got, err := (NopInventoryReader{}).Inventory(ctx); err != nil || len(got.FailureDomains) != 0 {
		t.Errorf("NopInventoryReader = %v, %v; want none", got, err)
	}
}
