package proxmox

import (
	"testing"
	"time"
)

// A memory recalls what it holds for cloneMemory, and no longer; what it has
// forgotten leaves it when it next remembers, a minute or more after it last did so.
func TestAMemoryForgetsAfterCloneMemory(t *testing.T) {
	var m memory[string, int]
	start := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	m.remember("a", 1, start)
	if v, ok := m.recall("a", start.Add(cloneMemory)); !ok || v != 1 {
		t.Fatalf("recall at cloneMemory = %d, %t; want 1", v, ok)
	}
	later := start.Add(cloneMemory + time.Second)
	if _, ok := m.recall("a", later); ok {
		t.Fatal("recalled a value older than cloneMemory")
	}
	if _, ok := m.recall("b", start); ok {
		t.Fatal("recalled a value never remembered")
	}
	m.remember("b", 2, later)
	if _, held := m.items["a"]; held || len(m.items) != 1 {
		t.Errorf("after remembering b the memory holds %v, want b alone", m.items)
	}
}
