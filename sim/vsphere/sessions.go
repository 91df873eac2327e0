package vspheresim

import (
	"context"
	"fmt"

	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// Sessions lists the open sessions of the simulator's clients, without the
// simulator's own (OwnClient's), so that a client's logins and logouts can be counted.
func (s *Simulator) Sessions(ctx context.Context) ([]types.UserSession, error) {
	var sm mo.SessionManager
	if err := property.DefaultCollector(s.own.Client).RetrieveOne(ctx, *s.own.ServiceContent.SessionManager, []string{"sessionList"}, &sm); err != nil {
		return nil, fmt.Errorf("failed to list the simulator's sessions: %w", err)
	}
	var out []types.UserSession
	for _, us := range sm.SessionList {
		if us.Key != s.ownKey {
			out = append(out, us)
		}
	}
	return out, nil
}

// TerminateSessions ends every session but the simulator's own, as a vCenter restart
// or an idle timeout does: clients must log in again.
func (s *Simulator) TerminateSessions(ctx context.Context) error {
	sessions, err := s.Sessions(ctx)
	if err != nil || len(sessions) == 0 {
		return err
	}
	keys := make([]string, 0, len(sessions))
	for _, us := range sessions {
		keys = append(keys, us.Key)
	}
	if err := s.own.SessionManager.TerminateSession(ctx, keys); err != nil {
		return fmt.Errorf("failed to terminate the simulator's sessions: %w", err)
	}
	return nil
}
