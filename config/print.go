package config

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
)

// redactedValue stands for a secret that is set.
const redactedValue = "xxxxx"

// fields are the Config's fields by name, in order, as they may be shown: a field tagged
// `secret:"true"` shows as xxxxx when set, and every other one as its value (a broker
// as its Endpoint.String, which has no credentials).
func (c Config) fields() []slog.Attr {
	v := reflect.ValueOf(c)
	t := v.Type()
	attrs := make([]slog.Attr, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		value := v.Field(i).Interface()
		if f.Tag.Get("secret") == "true" {
			if v.Field(i).IsZero() {
				value = ""
			} else {
				value = redactedValue
			}
		}
		attrs = append(attrs, slog.Any(f.Name, value))
	}
	return attrs
}

// LogValue makes slog log the Config without its secrets.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(c.fields()...)
}

// String writes the Config as Name=value pairs, without its secrets.
func (c Config) String() string {
	parts := make([]string, 0, 40)
	for _, a := range c.fields() {
		parts = append(parts, a.Key+"="+fmt.Sprint(a.Value.Any()))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// GoString keeps %#v from printing the secrets.
func (c Config) GoString() string { return "config.Config" + c.String() }

// Format prints the Config as String does, whatever the verb: %x or %q would otherwise
// print every field, secrets included.
func (c Config) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = fmt.Fprint(f, c.GoString())
		return
	}
	_, _ = fmt.Fprint(f, c.String())
}

// MarshalJSON encodes the Config without its secrets.
func (c Config) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	for _, a := range c.fields() {
		m[a.Key] = a.Value.Any()
	}
	return json.Marshal(m)
}
