"""Auth and error semantics of the manager routes."""
import unittest

import requests

from asclient import (METHODS, OTHER_TOKEN, TIMEOUT, URL, SandboxTest, data, needs_auth, proxy, raw)


class HealthTest(unittest.TestCase):
    def test_health_needs_no_auth(self):
        r = requests.get(f"{URL}/health", timeout=TIMEOUT)
        self.assertEqual(r.status_code, 200)
        body = r.json()
        self.assertEqual(body["status"], "healthy")
        self.assertIsInstance(body["version"], str)


class AuthTest(unittest.TestCase):
    @needs_auth
    def test_missing_token_every_route(self):
        for m in METHODS:
            for route in (m, m + "_async"):
                with self.subTest(route=route):
                    r = raw(route, {}, token="")
                    self.assertEqual(r.status_code, 401)
                    self.assertEqual(r.json(), {"detail": "Authentication required"})
                    self.assertEqual(r.headers.get("WWW-Authenticate"), "Bearer")

    @needs_auth
    def test_wrong_token(self):
        r = raw("list_session_keys", {}, token="not-the-token")
        self.assertEqual(r.status_code, 401)
        self.assertEqual(r.json(), {"detail": "Invalid authentication credentials"})
        self.assertEqual(r.headers.get("WWW-Authenticate"), "Bearer")

    @needs_auth
    def test_other_scheme_counts_as_missing(self):
        r = requests.post(f"{URL}/list_session_keys", json={}, headers={"Authorization": "Basic abc"}, timeout=TIMEOUT)
        self.assertEqual(r.status_code, 401)
        self.assertEqual(r.json(), {"detail": "Authentication required"})

    @needs_auth
    def test_proxy_needs_auth(self):
        r = proxy("GET", "whatever", "healthz", token="")
        self.assertEqual(r.status_code, 401)
        self.assertEqual(r.json(), {"detail": "Authentication required"})
        r = proxy("GET", "whatever", "healthz", token="wrong")
        self.assertEqual(r.status_code, 401)
        self.assertEqual(r.json(), {"detail": "Invalid authentication credentials"})

    def test_errors_are_500_with_method_name(self):
        r = raw("get_info", {"identity": "no-such-sandbox"})
        self.assertEqual(r.status_code, 500)
        self.assertEqual(r.json(), {"detail": "Error in get_info: No container found with id: no-such-sandbox."})
        r = raw("get_info_async", {"identity": "no-such-sandbox"})
        self.assertEqual(r.json(), {"detail": "Error in get_info_async: No container found with id: no-such-sandbox."})

    def test_python_argument_errors(self):
        r = raw("create", {"bogus": 1})
        self.assertEqual(r.status_code, 500)
        self.assertEqual(r.json()["detail"], "Error in create: create() got an unexpected keyword argument 'bogus'")
        r = raw("get_info", {})
        self.assertEqual(r.status_code, 500)
        self.assertEqual(r.json()["detail"],
                         "Error in get_info: get_info() missing 1 required positional argument: 'identity'")


@unittest.skipUnless(OTHER_TOKEN, "AGENTBOX_OTHER_TOKEN not set")
class IsolationTest(SandboxTest):
    def test_users_do_not_see_each_other(self):
        sid = self.create()
        r = raw("get_info", {"identity": sid}, token=OTHER_TOKEN)
        self.assertEqual(r.status_code, 500)
        self.assertIn("No container found", r.json()["detail"])
        # Releasing someone else's sandbox is "true" (unknown id) and harmless.
        self.assertIs(data("release", token=OTHER_TOKEN, identity=sid), True)
        self.assertEqual(data("get_status", identity=sid), "running")
        r = proxy("GET", sid, "healthz", token=OTHER_TOKEN)
        self.assertEqual(r.status_code, 404)
        self.assertEqual(r.json(), {"detail": f"sandbox not found: {sid}"})
        self.assertNotIn(sid, str(data("get_session_mapping", token=OTHER_TOKEN, session_ctx_id="x")))
        r = raw("call_tool", {"identity": sid, "tool_name": "run_shell_command", "arguments": {"command": "id"}},
                token=OTHER_TOKEN)
        self.assertEqual(r.status_code, 500)


if __name__ == "__main__":
    unittest.main()
