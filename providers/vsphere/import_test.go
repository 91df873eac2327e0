package vsphere

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	banlieuev1 "github.com/banlieue/banlieue/api/v1alpha1"
	"github.com/banlieue/banlieue/pkg/providersdk"
	"github.com/banlieue/banlieue/providers/vsphere/vspheretest"
)

// tinyOVF is an OVF descriptor of a VM with one CPU, 64 MiB and one disk.
const tinyOVF = `<?xml version="1.0" encoding="UTF-8"?>
<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1"
          xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1"
          xmlns:rasd="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData"
          xmlns:vmw="http://www.vmware.com/schema/ovf"
          xmlns:vssd="http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_VirtualSystemSettingData">
  <References>
    <File ovf:href="tiny-disk1.vmdk" ovf:id="file1" ovf:size="4096"/>
  </References>
  <DiskSection>
    <Info>Virtual disk information</Info>
    <Disk ovf:capacity="1" ovf:capacityAllocationUnits="byte * 2^30" ovf:diskId="vmdisk1" ovf:fileRef="file1"
          ovf:format="http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized"/>
  </DiskSection>
  <VirtualSystem ovf:id="tiny">
    <Info>A virtual machine</Info>
    <Name>tiny</Name>
    <OperatingSystemSection ovf:id="94" vmw:osType="ubuntu64Guest">
      <Info>The kind of installed guest operating system</Info>
    </OperatingSystemSection>
    <VirtualHardwareSection>
      <Info>Virtual hardware requirements</Info>
      <System>
        <vssd:ElementName>Virtual Hardware Family</vssd:ElementName>
        <vssd:InstanceID>0</vssd:InstanceID>
        <vssd:VirtualSystemIdentifier>tiny</vssd:VirtualSystemIdentifier>
        <vssd:VirtualSystemType>vmx-13</vssd:VirtualSystemType>
      </System>
      <Item>
        <rasd:AllocationUnits>hertz * 10^6</rasd:AllocationUnits>
        <rasd:ElementName>1 virtual CPU(s)</rasd:ElementName>
        <rasd:InstanceID>1</rasd:InstanceID>
        <rasd:ResourceType>3</rasd:ResourceType>
        <rasd:VirtualQuantity>1</rasd:VirtualQuantity>
      </Item>
      <Item>
        <rasd:AllocationUnits>byte * 2^20</rasd:AllocationUnits>
        <rasd:ElementName>64MB of memory</rasd:ElementName>
        <rasd:InstanceID>2</rasd:InstanceID>
        <rasd:ResourceType>4</rasd:ResourceType>
        <rasd:VirtualQuantity>64</rasd:VirtualQuantity>
      </Item>
      <Item>
        <rasd:Address>0</rasd:Address>
        <rasd:ElementName>ideController0</rasd:ElementName>
        <rasd:InstanceID>3</rasd:InstanceID>
        <rasd:ResourceType>5</rasd:ResourceType>
      </Item>
      <Item>
        <rasd:AddressOnParent>0</rasd:AddressOnParent>
        <rasd:ElementName>disk0</rasd:ElementName>
        <rasd:HostResource>ovf:/disk/vmdisk1</rasd:HostResource>
        <rasd:InstanceID>4</rasd:InstanceID>
        <rasd:Parent>3</rasd:Parent>
        <rasd:ResourceType>17</rasd:ResourceType>
      </Item>
    </VirtualHardwareSection>
  </VirtualSystem>
</Envelope>
`

// tinyOVA is an OVA (a tar of the descriptor and its disk) and its sha256 checksum.
func tinyOVA(t *testing.T) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		data []byte
	}{{"tiny.ovf", []byte(tinyOVF)}, {"tiny-disk1.vmdk", bytes.Repeat([]byte{0xab}, 4096)}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(f.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), "sha256:" + hex.EncodeToString(sum[:])
}

// imageServer serves the OVA once release is closed, counting requests.
func imageServer(t *testing.T, ova []byte, release <-chan struct{}) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		http.ServeContent(w, r, "tiny.ova", time.Time{}, bytes.NewReader(ova))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// resolveUntilDone calls ResolveImage until the import is no longer in progress.
func resolveUntilDone(t *testing.T, s *session, img *providersdk.Image) providersdk.ImageResult {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := s.ResolveImage(context.Background(), img)
		if err != nil {
			t.Fatal(err)
		}
		if !res.InProgress {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("import still in progress after 30s: %+v", res)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestImportFromMakesTheMissingTemplate(t *testing.T) {
	sim := vspheretest.Start(t)
	s := connect(t, sim, NewDriver())
	ova, sum := tinyOVA(t)
	release := make(chan struct{})
	srv, hits := imageServer(t, ova, release)
	img := &providersdk.Image{Name: "tiny", UID: "img-tiny", Source: banlieuev1.ImageSource{
		Kind: banlieuev1.ImageSourceTemplate, Ref: "tiny-template", ImportFrom: srv.URL + "/images/tiny.ova?token=secret", Checksum: sum,
	}}

	for range 2 {
		res, err := s.ResolveImage(context.Background(), img)
		if err != nil {
			t.Fatal(err)
		}
		want := providersdk.ImageResult{InProgress: true, Reason: "Importing",
			Message: `importing template "tiny-template" from ` + srv.URL + `/images/tiny.ova: 0%`}
		if diff := cmp.Diff(want, res); diff != "" {
			t.Fatalf("ResolveImage while downloading (-want +got):\n%s", diff)
		}
	}
	close(release)
	res := resolveUntilDone(t, s, img)
	if !res.Ready || !strings.HasPrefix(res.ResolvedRef, "vm-") {
		t.Fatalf("ResolveImage after the import = %+v; want the template ready", res)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the image was downloaded %d times, want once", n)
	}
	ref, found, err := s.findTemplate(context.Background(), "tiny-template")
	if err != nil || !found || ref.Value != res.ResolvedRef {
		t.Fatalf("template lookup = %v, %v, %v; want the imported template %s", ref, found, err, res.ResolvedRef)
	}
	again, err := s.ResolveImage(context.Background(), img)
	if err != nil || !again.Ready || again.ResolvedRef != res.ResolvedRef {
		t.Fatalf("ResolveImage once imported = %+v, %v", again, err)
	}
}

func TestImportWithAWrongChecksumFails(t *testing.T) {
	sim := vspheretest.Start(t)
	s := connect(t, sim, NewDriver())
	ova, _ := tinyOVA(t)
	release := make(chan struct{})
	close(release)
	srv, _ := imageServer(t, ova, release)
	wrong := "sha256:" + strings.Repeat("0", 64)
	img := &providersdk.Image{Name: "tiny", UID: "img-bad", Source: banlieuev1.ImageSource{
		Kind: banlieuev1.ImageSourceTemplate, Ref: "tiny-template", ImportFrom: srv.URL + "/tiny.ova", Checksum: wrong,
	}}
	res := resolveUntilDone(t, s, img)
	if res.Ready || res.Reason != "ImportFailed" || !strings.Contains(res.Message, "checksum mismatch") ||
		!strings.Contains(res.Message, "wants "+wrong) {
		t.Fatalf("ResolveImage = %+v; want an ImportFailed checksum mismatch", res)
	}
	if _, found, err := s.findTemplate(context.Background(), "tiny-template"); err != nil || found {
		t.Fatalf("a template was made from a download with the wrong checksum (%v)", err)
	}
}
