package providersdk

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
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
			if _, err := tc.client.Create(ctx, m); err != nil {
				t.Error(err)
			}
			if _, err := tc.client.Update(ctx, m, obs); err != nil {
				t.Error(err)
			}
			if _, err := tc.client.Delete(ctx, m); err != nil {
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

func TestClientFnsCallsItsFunctions(t *testing.T) {
	c := ClientFns{ObserveFn: func(context.Context, *Machine) (Observation, error) {
		return Observation{Exists: true, ProviderID: "x://1"}, nil
	}}
	obs, err := c.Observe(context.Background(), &Machine{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Observation{Exists: true, ProviderID: "x://1"}, obs); diff != "" {
		t.Errorf("observation (-want +got):\n%s", diff)
	}
}
