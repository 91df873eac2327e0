package vsphere

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	k8stypes "k8s.io/apimachinery/pkg/types"

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

// packageFile is one file of an OVF package.
type packageFile struct {
	name string
	data []byte
}

// tinyDisk is the disk tinyOVF references.
var tinyDisk = packageFile{"tiny-disk1.vmdk", bytes.Repeat([]byte{0xab}, 4096)}

// tinyDescriptor is tinyOVF as a file.
var tinyDescriptor = packageFile{"tiny.ovf", []byte(tinyOVF)}

// manifestOf is the OVF manifest tiny.mf with algo's digest of each file.
func manifestOf(algo string, files ...packageFile) packageFile {
	var b strings.Builder
	for _, f := range files {
		var sum []byte
		switch algo {
		case "SHA1":
			s := sha1.Sum(f.data)
			sum = s[:]
		case "SHA512":
			s := sha512.Sum512(f.data)
			sum = s[:]
		default:
			s := sha256.Sum256(f.data)
			sum = s[:]
		}
		fmt.Fprintf(&b, "%s(%s)= %s\n", algo, f.name, hex.EncodeToString(sum))
	}
	return packageFile{"tiny.mf", []byte(b.String())}
}

// tinyManifest is the manifest of tinyOVF and its disk.
func tinyManifest() packageFile { return manifestOf("SHA256", tinyDescriptor, tinyDisk) }

// ovaOf is an OVA (a tar) of files and its sha256 checksum.
func ovaOf(t *testing.T, files ...packageFile) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
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

// tinyOVA is an OVA of the descriptor, its manifest and its disk, and its sha256 checksum.
func tinyOVA(t *testing.T) ([]byte, string) {
	t.Helper()
	return ovaOf(t, tinyDescriptor, tinyManifest(), tinyDisk)
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

func TestImportVerifiesTheOVAAgainstItsManifest(t *testing.T) {
	sim := vspheretest.Start(t)
	s := connect(t, sim, NewDriver())
	otherDisk := packageFile{tinyDisk.name, bytes.Repeat([]byte{0xcd}, 4096)}
	for i, tc := range []struct {
		name  string
		files []packageFile
		// checksum asks for the OVA's checksum to be checked.
		checksum bool
		// want is in the failure; "" for an import that makes the template.
		want string
	}{
		{name: "an OVA whose SHA1 manifest matches is imported",
			files: []packageFile{tinyDescriptor, manifestOf("SHA1", tinyDescriptor, tinyDisk), tinyDisk}, checksum: true},
		{name: "an OVA whose SHA512 manifest matches is imported",
			files: []packageFile{tinyDescriptor, manifestOf("SHA512", tinyDescriptor, tinyDisk), tinyDisk}},
		{name: "a disk other than the manifest's refuses the import",
			files: []packageFile{tinyDescriptor, tinyManifest(), otherDisk}, checksum: true,
			want: "tiny-disk1.vmdk does not match the manifest tiny.mf: its SHA256 is "},
		{name: "a referenced file the manifest has no digest of refuses the import",
			files: []packageFile{tinyDescriptor, manifestOf("SHA256", tinyDescriptor), tinyDisk},
			want:  "the manifest tiny.mf has no digest of the file tiny-disk1.vmdk; the import is refused"},
		{name: "a descriptor the manifest has no digest of refuses the import",
			files: []packageFile{tinyDescriptor, manifestOf("SHA256", tinyDisk), tinyDisk},
			want:  "the manifest tiny.mf has no digest of the OVF descriptor tiny.ovf"},
		{name: "a manifest line that is no digest refuses the import",
			files: []packageFile{tinyDescriptor, {"tiny.mf", []byte("MD5(tiny.ovf)= 00\n")}, tinyDisk},
			want:  "line 1 of the manifest tiny.mf is not ALGO(file)= digest"},
		{name: "no manifest refuses the import when a checksum is asked for",
			files: []packageFile{tinyDescriptor, tinyDisk}, checksum: true,
			want: "the OVA has no manifest (.mf), and the image source asks for a checksum"},
		{name: "no manifest and no checksum is imported", files: []packageFile{tinyDescriptor, tinyDisk}},
		{name: "two disks of one name refuse the import",
			files: []packageFile{tinyDescriptor, tinyManifest(), otherDisk, tinyDisk},
			want:  "the OVA holds two files named tiny-disk1.vmdk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ova, sum := ovaOf(t, tc.files...)
			release := make(chan struct{})
			close(release)
			srv, _ := imageServer(t, ova, release)
			template := fmt.Sprintf("tiny-%d", i)
			src := banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceTemplate, Ref: template, ImportFrom: srv.URL + "/tiny.ova?token=s3cret"}
			if tc.checksum {
				src.Checksum = sum
			}
			importChecked(t, s, template, src, tc.want)
		})
	}
}

// ovfServer serves files at /pkg/<name> and counts the requests for each.
func ovfServer(t *testing.T, files ...packageFile) (*httptest.Server, func(name string) int32) {
	t.Helper()
	var mu sync.Mutex
	gets := map[string]int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gets[path.Base(r.URL.Path)]++
		mu.Unlock()
		for _, f := range files {
			if r.URL.Path == "/pkg/"+f.name {
				_, _ = w.Write(f.data)
				return
			}
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, func(name string) int32 {
		mu.Lock()
		defer mu.Unlock()
		return gets[name]
	}
}

func TestImportVerifiesTheOVFFilesAgainstTheManifestNextToIt(t *testing.T) {
	sim := vspheretest.Start(t)
	s := connect(t, sim, NewDriver())
	descSum := sha256.Sum256(tinyDescriptor.data)
	otherDisk := packageFile{tinyDisk.name, bytes.Repeat([]byte{0xcd}, 4096)}
	for i, tc := range []struct {
		name     string
		files    []packageFile
		checksum bool
		want     string
		// wantDiskGets is how often the disk is downloaded.
		wantDiskGets int32
	}{
		{name: "an OVF whose files match the manifest next to it is imported",
			files: []packageFile{tinyDescriptor, tinyManifest(), tinyDisk}, checksum: true, wantDiskGets: 1},
		{name: "a disk other than the manifest's refuses the import",
			files: []packageFile{tinyDescriptor, tinyManifest(), otherDisk}, checksum: true, wantDiskGets: 1,
			want: "tiny-disk1.vmdk does not match the manifest tiny.mf"},
		{name: "no manifest refuses the import before the disk is downloaded when a checksum is asked for",
			files: []packageFile{tinyDescriptor, tinyDisk}, checksum: true,
			want: "the OVF package tiny.ovf has no manifest (.mf), and the image source asks for a checksum"},
		{name: "no manifest and no checksum is imported", files: []packageFile{tinyDescriptor, tinyDisk}, wantDiskGets: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, gets := ovfServer(t, tc.files...)
			template := fmt.Sprintf("tiny-ovf-%d", i)
			src := banlieuev1.ImageSource{Kind: banlieuev1.ImageSourceTemplate, Ref: template, ImportFrom: srv.URL + "/pkg/tiny.ovf?token=s3cret"}
			if tc.checksum {
				src.Checksum = "sha256:" + hex.EncodeToString(descSum[:])
			}
			importChecked(t, s, template, src, tc.want)
			if n := gets(tinyDisk.name); n != tc.wantDiskGets {
				t.Errorf("the disk was downloaded %d times, want %d", n, tc.wantDiskGets)
			}
		})
	}
}

// importChecked resolves the image of src until its import is over and checks the
// outcome: the template imported when want is empty, else ImportFailed saying want and
// no template made; either way no message shows the URL's token.
func importChecked(t *testing.T, s *session, template string, src banlieuev1.ImageSource, want string) {
	t.Helper()
	res := resolveUntilDone(t, s, &providersdk.Image{Name: "tiny", UID: k8stypes.UID("img-" + template), Source: src})
	_, found, err := s.findTemplate(context.Background(), template)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case want == "" && (!res.Ready || !found):
		t.Fatalf("ResolveImage = %+v (template found: %v); want the template imported", res, found)
	case want != "" && (res.Reason != "ImportFailed" || !strings.Contains(res.Message, want)):
		t.Fatalf("ResolveImage = %+v; want ImportFailed saying %q", res, want)
	case want != "" && found:
		t.Errorf("a template was made from a package that fails its manifest")
	case strings.Contains(res.Message, "s3cret"):
		t.Errorf("the message %q shows the URL's token", res.Message)
	}
}
