package httpapi

import (
	"net/http/httptest"
	"testing"
	"time"
)

func TestTimeParamExact(t *testing.T) {
	want := time.Unix(1796222291, 582993708)
	for _, v := range []string{"1796222291.582993708", want.UTC().Format(time.RFC3339Nano)} {
		got, err := timeParam(httptest.NewRequest("GET", "/?start="+v, nil), "start")
		if err != nil || !got.Equal(want) {
			t.Fatalf("%s: %v %v, want %v", v, got, err, want)
		}
	}
	if got, err := timeParam(httptest.NewRequest("GET", "/?start=17", nil), "start"); err != nil || !got.Equal(time.Unix(17, 0)) {
		t.Fatalf("whole seconds: %v %v", got, err)
	}
	for _, bad := range []string{"soon", "-5", "1.2.3", "1.1234567891"} {
		if _, err := timeParam(httptest.NewRequest("GET", "/?start="+bad, nil), "start"); err == nil {
			t.Fatalf("%q parsed", bad)
		}
	}
}
