package tools

// Small builders for the tools' JSON schemas (draft 2020-12 subset that
// OpenAI, Anthropic and MCP clients all accept).

type prop struct {
	name   string
	schema map[string]any
}

func p(name string, schema map[string]any) prop { return prop{name, schema} }

// object is a schema of an object with props; required names the
// mandatory ones. No other properties are accepted.
func object(required []string, props ...prop) map[string]any {
	ps := map[string]any{}
	for _, x := range props {
		ps[x.name] = x.schema
	}
	s := map[string]any{"type": "object", "properties": ps, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

func req(names ...string) []string { return names }

func str(desc string) map[string]any {
	return map[string]any{"type": "string", "description": desc}
}

func strMax(desc string, maxLen int) map[string]any {
	s := str(desc)
	s["maxLength"] = maxLen
	return s
}

func integer(desc string, min, max int) map[string]any {
	return map[string]any{"type": "integer", "description": desc, "minimum": min, "maximum": max}
}

func number(desc string, min, max float64) map[string]any {
	return map[string]any{"type": "number", "description": desc, "minimum": min, "maximum": max}
}

func boolean(desc string) map[string]any {
	return map[string]any{"type": "boolean", "description": desc}
}

func enum(desc string, values ...string) map[string]any {
	return map[string]any{"type": "string", "description": desc, "enum": values}
}

func strArray(desc string, maxItems int) map[string]any {
	return map[string]any{"type": "array", "description": desc, "items": map[string]any{"type": "string"}, "maxItems": maxItems}
}

func strMap(desc string) map[string]any {
	return map[string]any{"type": "object", "description": desc, "additionalProperties": map[string]any{"type": "string"}}
}
