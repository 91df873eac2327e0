package proxmoxsim

// deleteTask is DELETE /nodes/{node}/tasks/{upid}: a running task is interrupted, as
// PVE's check_worker kills its process group, and ends with "interrupted by signal",
// its handler undoing what it prepared. A finished task is left as it is.
func (s *Simulator) deleteTask(c *call) (any, error) {
	t, err := s.findTask(c)
	if err != nil {
		return nil, err
	}
	if t.running {
		select {
		case <-t.stop:
		default:
			close(t.stop)
		}
	}
	return nil, nil
}
