package pve

import (
	"bytes"
	"context"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/proxmox/proxmoxtest"
)

// uploadOp is the upload as banlieue_backend_calls_total counts it.
const uploadOp = "POST /nodes/{node}/storage/{storage}/upload"

func uploadCalls(t *testing.T) float64 {
	t.Helper()
	var m dto.Metric
	if err := providersdk.BackendCalls.WithLabelValues("proxmox", uploadOp, "ok").Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// An upload, with a token or a ticket, is one counted call whose imgcopy task puts the
// file in the storage's listing.
func TestUploadIsATaskThatStoresTheFile(t *testing.T) {
	sim := proxmoxtest.Start(t)
	ctx := context.Background()
	for _, tt := range []struct {
		name        string
		credentials map[string][]byte
		file        string
	}{
		{name: "with an API token", credentials: sim.TokenCredentials(), file: "seed-token.iso"},
		{name: "with a ticket", credentials: sim.PasswordCredentials(), file: "seed-ticket.iso"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, sim, tt.credentials)
			if _, err := c.Cluster(ctx); err != nil { // logs in, for the ticket
				t.Fatal(err)
			}
			before := uploadCalls(t)
			data := bytes.Repeat([]byte("cidata\x00"), 1000)
			upid, err := c.Upload(ctx, proxmoxtest.Node1, proxmoxtest.SnippetsStorage, Upload{Content: "iso", Filename: tt.file, Data: data})
			if err != nil {
				t.Fatal(err)
			}
			if got := uploadCalls(t) - before; got != 1 {
				t.Errorf("%v uploads counted under %q, want 1", got, uploadOp)
			}
			waitTask(t, c, upid, "upload")

			volid := proxmoxtest.SnippetsStorage + ":iso/" + tt.file
			vols, err := c.Volumes(ctx, proxmoxtest.Node1, proxmoxtest.SnippetsStorage, VolumeFilter{Content: "iso"})
			if err != nil || !slices.Contains(vols, volid) {
				t.Fatalf("ISOs = %v, %v; want %s", vols, err, volid)
			}
			if got, _ := sim.Volume(proxmoxtest.Node1, volid); !bytes.Equal(got, data) {
				t.Errorf("%s holds %d bytes, want the %d uploaded", volid, len(got), len(data))
			}
		})
	}
}

func TestUploadRefusalCarriesPVEsMessage(t *testing.T) {
	sim := proxmoxtest.Start(t)
	c := newClient(t, sim, sim.TokenCredentials())
	_, err := c.Upload(context.Background(), proxmoxtest.Node1, proxmoxtest.Storage, Upload{Content: "iso", Filename: "x.iso", Data: []byte("x")})
	if err == nil || Message(err) != "can't upload to storage type 'lvmthin', not a file based storage!" {
		t.Errorf("upload to %s = %v, want PVE's refusal", proxmoxtest.Storage, err)
	}
}
