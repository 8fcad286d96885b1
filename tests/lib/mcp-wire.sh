# shellcheck shell=bash
# shellcheck disable=SC2154 # $work, $U, $TA, $TB and $TADM come from api.sh and the suite
# Raw wire checks of sandpoold's MCP transport (docs/mcp.md, "The transport") with curl, for
# tests/integration/test-mcp.sh (sourced after tap.sh and api.sh; uses $U, $TA, $TB, $TADM, $work).

MCP_ACCEPT='Accept: application/json, text/event-stream'
# mcp_req [CURL-ARG...] -- BODY: POST BODY to $U/mcp with curl's extra arguments; the answer's
# headers go to $work/mh, its body to $work/mb; prints the status.
mcp_req() {
    local args=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
    shift
    curl -s -N -D "$work/mh" -o "$work/mb" -w '%{http_code}' -X POST "${args[@]}" \
        --data-binary "$1" "$U/mcp"
}
# mcp_post TOKEN SESSION BODY [CURL-ARG...]: a well-formed POST (Accept, Content-Type, the token,
# and the session id when not empty).
mcp_post() {
    local tok=$1 sid=$2 body=$3
    shift 3
    mcp_req -H "Authorization: Bearer $tok" -H "$MCP_ACCEPT" -H 'Content-Type: application/json' \
        ${sid:+-H "Mcp-Session-Id: $sid"} "$@" -- "$body"
}
# header NAME: the value of the last answer's header NAME (case-insensitive, CR stripped).
header() { awk -v n="$(echo "$1" | tr '[:upper:]' '[:lower:]')" -F': ' \
    'tolower($1) == n { sub(/\r$/, ""); sub(/^[^:]*: /, ""); print }' "$work/mh"; }
# code_is STATUS JSONRPC-CODE: the last answer was STATUS with a JSON-RPC error of that code.
rpc_code() { jq -r '.error.code // empty' "$work/mb" 2>/dev/null; }
answer() { printf '%s %s' "$1" "$(rpc_code)"; }
# rpc_msgs FILE: the JSON-RPC messages of an answer: an SSE stream's data lines, or a JSON body.
rpc_msgs() { if grep -q '^data: ' "$1"; then sed -n 's/^data: //p' "$1"; else cat "$1"; fi; }
INIT='{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}}'

wire_auth_checks() {
    local s
    s=$(mcp_req -H "$MCP_ACCEPT" -H 'Content-Type: application/json' -- "$INIT")
    check_eq "wire: no token → 401" "$s" 401
    check_eq "wire: ... WWW-Authenticate is exactly Bearer realm=\"sandpool\"" \
        "$(header www-authenticate)" 'Bearer realm="sandpool"'
    check "wire: ... and names no resource_metadata" lacks -i resource_metadata "$work/mh"
    s=$(mcp_post "wrong-$TA" "" "$INIT")
    check_eq "wire: a wrong token → 401" "$s" 401
    check_eq "wire: ... WWW-Authenticate is exactly Bearer realm=\"sandpool\"" \
        "$(header www-authenticate)" 'Bearer realm="sandpool"'
    check "wire: ... and names no resource_metadata" lacks -i resource_metadata "$work/mh"
    for p in oauth-protected-resource oauth-protected-resource/mcp oauth-authorization-server; do
        check_eq "wire: /.well-known/$p is 404" \
            "$(curl -s -o /dev/null -w '%{http_code}' "$U/.well-known/$p")" 404
    done
    check_eq "wire: the admin token → 403" "$(mcp_post "$TADM" "" "$INIT")" 403
}

wire_request_checks() {
    local s
    check_eq "wire: Origin http://evil.example → 403" \
        "$(mcp_post "$TA" "" "$INIT" -H 'Origin: http://evil.example')" 403
    s=$(mcp_req -H "Authorization: Bearer $TA" -H 'Accept: text/html' -H 'Content-Type: application/json' -- "$INIT")
    check_eq "wire: Accept text/html → 406" "$s" 406
    s=$(mcp_req -H "Authorization: Bearer $TA" -H "$MCP_ACCEPT" -H 'Content-Type: text/plain' -- "$INIT")
    check_eq "wire: Content-Type text/plain → 415" "$s" 415
    check_eq "wire: bad JSON → 400 -32700" "$(answer "$(mcp_post "$TA" "" '{"jsonrpc": "2.0", "id": 1,')")" "400 -32700"
    check_eq "wire: a JSON array (batch) → 400 -32600" "$(answer "$(mcp_post "$TA" "" "[$INIT]")")" "400 -32600"
    check_eq "wire: jsonrpc 1.0 → 400 -32600" \
        "$(answer "$(mcp_post "$TA" "" '{"jsonrpc": "1.0", "id": 1, "method": "ping"}')")" "400 -32600"
    check_eq "wire: a request without a session → 400 -32000" \
        "$(answer "$(mcp_post "$TA" "" '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}')")" "400 -32000"
    check_eq "wire: an unknown session → 404 -32001" \
        "$(answer "$(mcp_post "$TA" "$(openssl rand -hex 16)" '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}')")" "404 -32001"
    s=$(mcp_post "$TA" "" '{"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}' \
        -H 'MCP-Protocol-Version: 2026-07-28')
    check "wire: the 2026-07-28 server/discover probe → 4xx (got $s)" bash -c "[[ '$s' =~ ^4[0-9][0-9]$ ]]"
    check "wire: ... with a JSON-RPC error, not -32020..-32022 (got $(rpc_code))" \
        jq_true '(.error.code | type == "number") and (.error.code < -32022 or .error.code > -32020)' "$work/mb"
}

# wire_session_checks: initialize and what a session answers; sets sid.
wire_session_checks() {
    local s
    s=$(mcp_post "$TA" "" "$INIT")
    sid=$(header mcp-session-id)
    check_eq "wire: initialize → 200" "$s" 200
    check "wire: ... Mcp-Session-Id is 32 hex digits ($sid)" bash -c "[[ '$sid' =~ ^[0-9a-f]{32}$ ]]"
    check "wire: ... the result echoes id 0 and names a protocol version" \
        jq_true '.id == 0 and (.id | type == "number") and (.result.protocolVersion | type == "string")' "$work/mb"
    s=$(mcp_post "$TA" "$sid" '{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    check_eq "wire: a notification → 202" "$s" 202
    check_eq "wire: ... with an empty body" "$(wc -c <"$work/mb")" 0
    check_eq "wire: MCP-Protocol-Version 1999-01-01 → 400" \
        "$(mcp_post "$TA" "$sid" '{"jsonrpc": "2.0", "id": 1, "method": "ping"}' -H 'MCP-Protocol-Version: 1999-01-01')" 400
    check_eq "wire: an unknown method → 200 -32601" \
        "$(answer "$(mcp_post "$TA" "$sid" '{"jsonrpc": "2.0", "id": 7, "method": "prompts/list"}')")" "200 -32601"
    mcp_post "$TA" "$sid" '{"jsonrpc": "2.0", "id": 0, "method": "ping"}' >/dev/null
    check "wire: id 0 is echoed as the number 0" jq_true '.id == 0 and (.id | type == "number") and has("result")' "$work/mb"
    mcp_post "$TA" "$sid" '{"jsonrpc": "2.0", "id": "req-\u00e9-1", "method": "ping"}' >/dev/null
    check "wire: a string id is echoed verbatim" jq_true '.id == "req-é-1" and has("result")' "$work/mb"
    s=$(mcp_post "$TB" "$sid" '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}')
    s="$s $(mcp_post "$TA" "$sid" '{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}')"
    check_eq "wire: tools/list with tenant A's session: tenant B 404, tenant A 200" "$s" "404 200"
    s=$(curl -s -D "$work/mh" -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $TA" \
        -H 'Accept: text/event-stream' -H "Mcp-Session-Id: $sid" "$U/mcp")
    check_eq "wire: GET with a session → 405" "$s" 405
    check "wire: ... Allow names POST and DELETE ($(header allow))" \
        bash -c "[[ '$(header allow)' == *POST* && '$(header allow)' == *DELETE* ]]"
}

# sse_well_formed FILE: every line is `event: message`, a `data:` line of JSON, a comment or
# blank; as many events as data lines; no id: lines; the last message is a result.
sse_well_formed() {
    local f=$1
    grep -q '^data: ' "$f" || return 1
    awk '/^event: message\r?$/ || /^data: / || /^:/ || /^\r?$/ {next} {bad = 1} END {exit bad}' "$f" || return 1
    [ "$(grep -c '^event: message' "$f")" = "$(grep -c '^data: ' "$f")" ] || return 1
    sed -n 's/^data: //p' "$f" | jq_true -s 'all(.[]; .jsonrpc == "2.0") and (last | has("result"))'
}

wire_call_checks() {
    local s call
    call='{"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "import time\nfor i in range(3): print(i, flush=True); time.sleep(0.2)"}, "_meta": {"progressToken": "p1"}}}'
    s=$(mcp_post "$TA" "$sid" "$call")
    check_eq "wire: tools/call → 200" "$s" 200
    check "wire: ... Content-Type text/event-stream" bash -c "[[ '$(header content-type)' == text/event-stream* ]]"
    check "wire: ... events are event: message + one data: line each, and end in the result" \
        sse_well_formed "$work/mb"
    check "wire: ... no id: lines" bash -c "grep -q '^data: ' '$work/mb' && ! grep -q '^id:' '$work/mb'"
    sed -n 's/^data: //p' "$work/mb" >"$work/md"
    check "wire: ... progress notifications carry the token" jq_true -s \
        'map(select(.method == "notifications/progress")) | length > 0 and all(.[]; .params.progressToken == "p1")' "$work/md"
    check "wire: ... the result holds the output" jq_true -s 'last.result.structuredContent.stdout == "0\n1\n2\n"' "$work/md"
    call='{"jsonrpc": "2.0", "id": 13, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "print(2)"}}}'
    s=$(mcp_post "$TA" "$sid" "$call")
    check "wire: a quick tools/call without a progressToken → 200 application/json ($s, $(header content-type))" \
        bash -c "[ '$s' = 200 ] && [[ '$(header content-type)' == application/json* ]]"
    check "wire: ... holding the result" jq_true '.id == 13 and .result.structuredContent.stdout == "2\n"' "$work/mb"
    call='{"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {"name": "execute_python", "arguments": {"code": "import time\ntime.sleep(16)\n\"done\""}}}'
    s=$(mcp_post "$TA" "$sid" "$call")
    check_eq "wire: a silent 16 s call → 200" "$s" 200
    check "wire: ... carries a : keepalive comment" grep -q '^: keepalive' "$work/mb"
    check "wire: ... and still ends in its result" sse_well_formed "$work/mb"
    s=$(curl -s -o /dev/null -w '%{http_code}' -X DELETE -H "Authorization: Bearer $TA" -H "Mcp-Session-Id: $sid" "$U/mcp")
    check_eq "wire: DELETE → 204" "$s" 204
    check_eq "wire: ... and the session is then unknown (404 -32001)" \
        "$(answer "$(mcp_post "$TA" "$sid" '{"jsonrpc": "2.0", "id": 1, "method": "ping"}')")" "404 -32001"
}
