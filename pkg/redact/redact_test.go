package redact

import "testing"

func TestURL(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"a URL without credentials is unchanged", "https://vcenter.example/sdk", "https://vcenter.example/sdk"},
		{"a password in the userinfo is dropped", "https://admin:s3cret@vcenter.example/sdk", "https://vcenter.example/sdk"},
		{"a user alone is dropped", "qemu+ssh://root@host.example/system", "qemu+ssh://host.example/system"},
		{"a query token is dropped", "https://images.example/a.qcow2?token=abc&x=1", "https://images.example/a.qcow2"},
		{"a fragment is dropped", "https://images.example/a.qcow2#sig=abc", "https://images.example/a.qcow2"},
		{"an unparsable URL is a placeholder", "https://a b:%zz@host/", Placeholder},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := URL(tc.in); got != tc.want {
				t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestText(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"text without a URL is unchanged", "datastore ds1 is full", "datastore ds1 is full"},
		{"a Go HTTP error loses the URL's token",
			`Get "https://images.example/a.qcow2?token=abc": dial tcp 127.0.0.1:1: connect: connection refused`,
			`Get "https://images.example/a.qcow2": dial tcp 127.0.0.1:1: connect: connection refused`},
		{"a URL ending a sentence keeps the full stop",
			"cannot reach https://u:p@pve.example:8006/api2/json?x=1.", "cannot reach https://pve.example:8006/api2/json."},
		{"userinfo without a scheme is dropped", "login as admin:hunter2@pve.example failed", "login as pve.example failed"},
		{"two URLs are both redacted", "from https://a:b@x.example/?t=1 to https://y.example/#f", "from https://x.example/ to https://y.example/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Text(tc.in); got != tc.want {
				t.Errorf("Text(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
		})
	}
}
