// Points node-gyp at this machine's own Node headers, so native builds (better-sqlite3) never download them.
const fs = require('node:fs'), path = require('node:path')
const prefix = path.resolve(path.dirname(process.execPath), '..')
module.exports = { hooks: { updateConfig(config) {
  if (!process.env.npm_config_nodedir && fs.existsSync(path.join(prefix, 'include/node/node_version.h')))
    config.extraEnv = { ...config.extraEnv, npm_config_nodedir: prefix }
  return config } } }
