// The desktop page (GET /v1/sandboxes/{id}/desktop): noVNC's client
// connected to the page's WebSocket with the link's signature. View-only
// is enforced by the server (the daemon drops a viewer's input); the
// client's viewOnly only keeps it from trying.
import RFB from '/desktop/novnc/core/rfb.js';

const query = new URLSearchParams(location.search);
const interactive = query.get('mode') === 'interactive';
const status = document.getElementById('status');
const show = (state, text) => { status.dataset.state = state; status.textContent = text; };

const scheme = location.protocol === 'https:' ? 'wss://' : 'ws://';
const url = scheme + location.host + location.pathname.replace(/\/$/, '') + '/ws' + location.search;
const rfb = new RFB(document.getElementById('screen'), url, { wsProtocols: ['binary'], shared: true });
rfb.viewOnly = !interactive;
rfb.scaleViewport = true;
rfb.resizeSession = false;
rfb.focusOnClick = interactive;
rfb.addEventListener('connect', () => show('connected', interactive ? 'interactive' : 'view only'));
rfb.addEventListener('disconnect', (e) => show('disconnected', e.detail.clean ? 'disconnected' : 'connection lost (the link may have expired)'));
rfb.addEventListener('securityfailure', (e) => show('disconnected', 'refused: ' + (e.detail.reason || e.detail.status)));
window.agentboxDesktop = rfb;
