package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-storage/vigil/httpapi"
	"github.com/vigil-storage/vigil/settings"
)

// historyless adds the recording methods to *settings.Settings for the example.
type historyless struct{ *settings.Settings }

func (h historyless) SetAs(ctx context.Context, name, value string, _ httpapi.Actor) error {
	return h.Set(ctx, name, value)
}
func (h historyless) ResetAs(ctx context.Context, name string, _ httpapi.Actor) error {
	return h.Reset(ctx, name)
}
func (h historyless) SetMany(ctx context.Context, values map[string]string, who httpapi.Actor) error {
	for n, v := range values {
		if err := h.Set(ctx, n, v); err != nil {
			return err
		}
	}
	return nil
}
func (h historyless) History(context.Context, int) ([]httpapi.ChangeRecord, error) { return nil, nil }

func ExampleAPI() {
	store := settings.NewMemoryStore()
	s, _ := settings.New(store, "", settings.WithRegisterer(prometheus.NewRegistry()))
	defer s.Close()
	api, err := httpapi.New(httpapi.Config{Settings: historyless{s}, Token: "t0ken"})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	api.Register(mux)
	srv := httptest.NewServer(httpapi.Secure(mux))
	defer srv.Close()

	put := func(token, body string) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/settings/node-down-grace-period", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer res.Body.Close()
		var out struct {
			Value string
			Error httpapi.ErrorBody
		}
		_ = json.NewDecoder(res.Body).Decode(&out)
		fmt.Printf("%d value=%q error=%q allowed=%q\n", res.StatusCode, out.Value, out.Error.Code, out.Error.Allowed)
	}
	put("guess", `{"value": "5s"}`)
	put("t0ken", `{"value": "forever"}`)
	put("t0ken", `{"value": "5s"}`)
	fmt.Println(s.NodeDownGracePeriod())
	// Output:
	// 401 value="" error="unauthorized" allowed=""
	// 400 value="" error="invalid-value" allowed="a duration from 0s to 10m (e.g. 500ms, 15s, 2m)"
	// 200 value="5s" error="" allowed=""
	// 5s
}
