package sandbox

import (
	"reflect"
	"testing"
	"time"
)

func TestServiceOf(t *testing.T) {
	hc := &Healthcheck{Test: []string{"CMD-SHELL", "curl -f localhost"}, Interval: time.Second, Retries: 3}
	cases := []struct {
		name string
		cfg  ImageConfig
		want *Service
		bad  bool
	}{
		{"toolbox CMD is no service", ImageConfig{Cmd: []string{"bash"}}, nil, false},
		{"nothing", ImageConfig{}, nil, false},
		{"EXPOSE makes CMD a service, ready on the port", ImageConfig{Entrypoint: []string{"/entry"}, Cmd: []string{"serve"}, Ports: []string{"9000/udp", "8080/tcp", "80"}},
			&Service{Cmd: []string{"/entry", "serve"}, Ready: &ReadyCheck{Port: 80}}, false},
		{"HEALTHCHECK is the readiness check", ImageConfig{Cmd: []string{"app"}, Healthcheck: hc},
			&Service{Cmd: []string{"app"}, Ready: &ReadyCheck{Cmd: []string{"/bin/sh", "-c", "curl -f localhost"}, Interval: time.Second, Retries: 3}}, false},
		{"HEALTHCHECK NONE", ImageConfig{Cmd: []string{"app"}, Healthcheck: &Healthcheck{Test: []string{"NONE"}}}, nil, false},
		{"labels", ImageConfig{Cmd: []string{"bash"}, Labels: map[string]string{LabelStartCmd: "run it", LabelReadyPort: "3000"}},
			&Service{Cmd: []string{"/bin/sh", "-c", "run it"}, Ready: &ReadyCheck{Port: 3000}}, false},
		{"explicit fields win", ImageConfig{StartCmd: []string{"a"}, ReadyCmd: []string{"b"}, Labels: map[string]string{LabelStartCmd: "x", LabelReadyCmd: "y"}},
			&Service{Cmd: []string{"a"}, Ready: &ReadyCheck{Cmd: []string{"b"}}}, false},
		{"service off", ImageConfig{Cmd: []string{"app"}, Ports: []string{"80"}, Labels: map[string]string{LabelService: "off"}}, nil, false},
		{"code context", ImageConfig{Labels: map[string]string{LabelCodeContext: "python", LabelCodeWarmup: "import os"}},
			&Service{CodeContext: "python", Warmup: "import os"}, false},
		{"warmup without context", ImageConfig{Labels: map[string]string{LabelCodeWarmup: "x"}}, nil, true},
		{"bad port", ImageConfig{Labels: map[string]string{LabelStartCmd: "x", LabelReadyPort: "http"}}, nil, true},
		{"port out of range", ImageConfig{ReadyPort: 70000, StartCmd: []string{"x"}}, nil, true},
		{"bad healthcheck", ImageConfig{Cmd: []string{"x"}, Healthcheck: &Healthcheck{Test: []string{"RUN", "x"}}}, nil, true},
	}
	for _, c := range cases {
		got, err := ServiceOf(c.cfg)
		if (err != nil) != c.bad || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: ServiceOf = %+v, %v; want %+v (error %v)", c.name, got, err, c.want, c.bad)
		}
	}
}
