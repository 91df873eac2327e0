package proxmoxsim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	proxmox "github.com/luthermonson/go-proxmox"
)

func TestDownloadURLVerifiesTheChecksum(t *testing.T) {
	image := []byte("QFI\xfb not really a disk image")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(image) }))
	defer srv.Close()
	sum := sha256.Sum256(image)
	tests := []struct {
		name     string
		checksum string
		wantErr  string
	}{
		{name: "a matching checksum keeps the file", checksum: hex.EncodeToString(sum[:])},
		{name: "a mismatch fails the task", checksum: strings.Repeat("0", 64), wantErr: "checksum mismatch: got '" + hex.EncodeToString(sum[:]) + "' != expect '" + strings.Repeat("0", 64) + "'"},
	}
	s := start(t, Options{Templates: map[string]string{}})
	c := client(t, s)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := c.NodeRef("pve2").StorageRef("local")
			name := strings.ReplaceAll(tt.name, " ", "-") + ".img"
			err := wait(t)(st.DownloadURLWithHash(context.Background(), "iso", name, srv.URL+"/jammy.img", tt.checksum, "sha256"))
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (!proxmox.IsTaskFailed(err) || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("download: %v, want error %q", err, tt.wantErr)
			}
			data, ok := s.Volume("pve2", "local:iso/"+name)
			if diff := cmp.Diff(tt.wantErr == "", ok); diff != "" || (ok && string(data) != string(image)) {
				t.Errorf("stored file: %q, %v; want it kept only when the checksum matched", data, ok)
			}
		})
	}
}

func TestUploadsStoreFilesButNotSnippets(t *testing.T) {
	s := start(t, Options{Templates: map[string]string{}})
	ctx := context.Background()
	c := client(t, s)
	must(t)(c.NodeRef("pve2").StorageRef("local").UploadString("iso", "seed.iso", "cidata"))
	content, err := c.NodeRef("pve2").StorageRef("local").GetContent(ctx)
	if err != nil || len(content) != 1 || content[0].Volid != "local:iso/seed.iso" || content[0].Size != 6 {
		t.Errorf("content after upload: %+v, %v", content, err)
	}
	var upid proxmox.UPID
	err = c.UploadReader("/nodes/pve1/storage/local/upload", map[string]string{"content": "snippets"}, "user-data.yaml", strings.NewReader("#cloud-config\n"), 14, &upid)
	if !proxmox.IsBadRequest(err) || !strings.Contains(err.Error(), "does not have a value in the enumeration 'iso, vztmpl, import'") {
		t.Errorf("snippet upload: %v, want PVE's refusal", err)
	}
}

func TestCicustomReadsSnippetsPutOnTheNode(t *testing.T) {
	s := start(t, Options{})
	ctx := context.Background()
	c := client(t, s)
	newid, task, err := template(t, c).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 170})
	must(t)(task, err)
	vm := c.NodeRef("pve1").VirtualMachineRef(newid)
	must(t)(vm.Config(ctx, proxmox.VirtualMachineOption{Name: "cicustom", Value: "user=local:snippets/vm-170.yaml"}))
	err = wait(t)(vm.Start(ctx))
	if !proxmox.IsTaskFailed(err) || !strings.Contains(err.Error(), "unable to open file '/var/lib/vz/snippets/vm-170.yaml'") {
		t.Fatalf("start without the snippet: %v", err)
	}
	if err := s.WriteSnippet("pve1", "local", "vm-170.yaml", []byte("#cloud-config\n")); err != nil {
		t.Fatal(err)
	}
	must(t)(vm.Start(ctx))
}

func TestGoProxmoxsCloudInitISOFlowWorksEndToEnd(t *testing.T) {
	s := start(t, Options{})
	ctx := context.Background()
	c := client(t, s)
	newid, task, err := template(t, c).Clone(ctx, &proxmox.VirtualMachineCloneOptions{NewID: 180})
	must(t)(task, err)
	vm := c.NodeRef("pve1").VirtualMachineRef(newid)
	if err := vm.CloudInit(ctx, "ide3", "#cloud-config\n", "instance-id: vm-180\n", "", ""); err != nil {
		t.Fatal(err)
	}
	conf, _ := s.VM(newid)
	if diff := cmp.Diff([]string{"local:iso/user-data-180.iso,media=cdrom", "order=scsi0;ide3", "go-proxmox+cloud-init"}, []string{conf["ide3"], conf["boot"], conf["tags"]}); diff != "" {
		t.Errorf("config after CloudInit (-want +got):\n%s", diff)
	}
	must(t)(vm.Delete(ctx, nil))
	if _, ok := s.Volume("pve1", "local:iso/user-data-180.iso"); ok {
		t.Error("Delete left the cloud-init ISO behind")
	}
}
