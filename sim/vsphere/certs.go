package vspheresim

import "github.com/banlieue/banlieue/sim/simcert"

// NewCA returns the PEM certificate of a fresh CA that signed nothing: a CA bundle that
// no simulator's certificate verifies against, for testing that a client refuses it.
func NewCA() ([]byte, error) {
	a, err := simcert.NewAuthority("unrelated CA")
	if err != nil {
		return nil, err
	}
	return a.PEM, nil
}
