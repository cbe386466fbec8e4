package tracing

import (
	"context"
	"log/slog"
	"reflect"
	"testing"
)

func TestParseHeaders(t *testing.T) {
	got, err := parseHeaders(" authorization=Bearer%20abc , x-tenant=t1")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"authorization": "Bearer abc", "x-tenant": "t1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"novalue", "=v", "k=%zz"} {
		if _, err := parseHeaders(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if got, err := parseHeaders(""); err != nil || got != nil {
		t.Errorf("empty: %v %v", got, err)
	}
}

func TestSetupRefusesBadEndpoint(t *testing.T) {
	for _, ep := range []string{"127.0.0.1:4318", "ftp://x/", "http://"} {
		s := DefaultSettings()
		s.OTLPEndpoint = ep
		if _, err := Setup(context.Background(), s, "n1", "v", slog.Default()); err == nil {
			t.Errorf("endpoint %q accepted", ep)
		}
	}
	shutdown, err := Setup(context.Background(), DefaultSettings(), "n1", "v", slog.Default())
	if err != nil || shutdown(context.Background()) != nil {
		t.Fatalf("no endpoint: %v", err)
	}
}
