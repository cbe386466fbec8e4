package manager

import (
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func TestTemplateDefaults(t *testing.T) {
	def := sandbox.Resources{MemoryBytes: 512 << 20, PIDs: 256, CPUs: 1, DiskBytes: 1 << 30}
	max := sandbox.Resources{MemoryBytes: 8 << 30, PIDs: 4096}
	tmpl := func(labels map[string]string) sandbox.Template {
		return sandbox.Template{Kind: sandbox.TemplateImage, Config: sandbox.ImageConfig{Labels: labels}}
	}
	cases := []struct {
		labels    map[string]string
		mem, pids int64
	}{
		{nil, 512 << 20, 256},
		{map[string]string{LabelMemory: "2G", LabelPIDs: "1024"}, 2 << 30, 1024},
		{map[string]string{LabelMemory: " 1536M "}, 1536 << 20, 256},
		// Clamped to what a caller may ask for.
		{map[string]string{LabelMemory: "1T", LabelPIDs: "100000"}, 8 << 30, 4096},
		// Garbage is ignored: the server's defaults apply.
		{map[string]string{LabelMemory: "lots", LabelPIDs: "-5"}, 512 << 20, 256},
		{map[string]string{LabelMemory: "NaN", LabelPIDs: "3"}, 512 << 20, 256},
		{map[string]string{LabelMemory: "-1G", LabelPIDs: "1e9"}, 512 << 20, 256},
	}
	for _, c := range cases {
		got := templateDefaults(tmpl(c.labels), def, max)
		if got.MemoryBytes != c.mem || got.PIDs != c.pids || got.CPUs != 1 || got.DiskBytes != 1<<30 {
			t.Errorf("labels %v: %+v, want memory %d pids %d (others unchanged)", c.labels, got, c.mem, c.pids)
		}
	}
	// A create's explicit resources win over the template's.
	req := sandbox.Resources{MemoryBytes: 300 << 20}
	got := req.WithDefaults(templateDefaults(tmpl(map[string]string{LabelMemory: "2G", LabelPIDs: "1024"}), def, max))
	if got.MemoryBytes != 300<<20 || got.PIDs != 1024 {
		t.Errorf("explicit memory with template defaults: %+v", got)
	}
}
