package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// KillAPIServer kills kube-apiserver with SIGKILL, as a crash or the loss of its node
// does, and leaves etcd running. keepDir must be an empty directory that outlives the
// restart (a t.TempDir()): the API server's certificates are kept there, so that
// StartAPIServer serves the same certificate on the same port and every client,
// kubeconfigs written by Kubeconfig included, reconnects without change.
//
// envtest makes the certificate directory itself and removes it when the API server
// stops; started again, it would make a new serving CA that no client trusts. Copying
// the directory and starting from the copy keeps the old one; envtest then leaves it
// alone, and keepDir's owner removes it. The kill is by process ID because envtest's
// own Stop sends SIGTERM and waits 20 seconds for the graceful shutdown of an API
// server with open watches.
func (e *Env) KillAPIServer(keepDir string) error {
	api := e.env.ControlPlane.APIServer
	if api == nil {
		return errors.New("no API server to kill")
	}
	pid, err := apiServerPID(api.CertDir)
	if err != nil {
		return err
	}
	if api.CertDir != keepDir {
		if err := os.CopyFS(keepDir, os.DirFS(api.CertDir)); err != nil {
			return fmt.Errorf("failed to keep the API server's certificates: %w", err)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("failed to kill the API server: %w", err)
	}
	// envtest notices the exit in a goroutine of its own; until it has, its Stop
	// signals the dead process and fails.
	deadline := time.Now().Add(10 * time.Second)
	for err = api.Stop(); err != nil && time.Now().Before(deadline); err = api.Stop() {
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("failed to stop the API server: %w", err)
	}
	api.CertDir = keepDir
	return nil
}

// StartAPIServer starts the API server KillAPIServer killed, on the same port, with
// the same certificates and etcd, and waits until it is healthy.
func (e *Env) StartAPIServer() error {
	if err := e.env.ControlPlane.APIServer.Start(); err != nil {
		return fmt.Errorf("failed to start the API server again: %w", err)
	}
	return nil
}

// apiServerPID finds the kube-apiserver whose --cert-dir is certDir: that flag is
// unique to one envtest API server.
func apiServerPID(certDir string) (int, error) {
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		return 0, err
	}
	flag := []byte("--cert-dir=" + certDir)
	for _, path := range procs {
		cmdline, err := os.ReadFile(path) //nolint:gosec // a /proc/<pid>/cmdline file found by the glob above
		if err != nil {
			continue // gone meanwhile
		}
		args := bytes.Split(cmdline, []byte{0})
		if filepath.Base(string(args[0])) != "kube-apiserver" {
			continue
		}
		for _, a := range args[1:] {
			if bytes.Equal(a, flag) {
				return strconv.Atoi(filepath.Base(filepath.Dir(path)))
			}
		}
	}
	return 0, fmt.Errorf("no kube-apiserver with --cert-dir=%s is running", certDir)
}
