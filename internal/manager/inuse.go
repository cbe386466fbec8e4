package manager

// TemplateUsers counts the live sandboxes (warm ones included: their root
// filesystems hold the layers too) made from the template with this
// content digest. The template store asks it before deleting a template.
func (m *Manager) TemplateUsers(digest string) int {
	if digest == "" {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.entries {
		if e.rec != nil && e.rec.TemplateDigest == digest {
			n++
		}
	}
	return n
}
