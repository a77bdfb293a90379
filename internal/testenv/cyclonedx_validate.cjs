// Validates CycloneDX JSON files against the 1.6 schema with the
// CycloneDX project's own library (@cyclonedx/cyclonedx-library, strict
// JSON validator: ajv with formats). Usage: node validate.cjs NODE_MODULES FILE...
// Exit 0 when every file is valid; 1 with the errors otherwise; 2 when the
// library is missing.
'use strict';
const path = require('path');
const [modules, ...files] = process.argv.slice(2);
let CDX;
try {
  CDX = require(path.join(modules, '@cyclonedx', 'cyclonedx-library'));
} catch (e) {
  console.error('cyclonedx library missing: ' + e.message);
  process.exit(2);
}
const fs = require('fs');
(async () => {
  const v = new CDX.Validation.JsonStrictValidator(CDX.Spec.Version.v1dot6);
  let bad = 0;
  for (const f of files) {
    const errs = await v.validate(fs.readFileSync(f, 'utf8'));
    if (errs === null) {
      console.log('valid ' + f);
    } else {
      bad++;
      console.log('invalid ' + f + ': ' + JSON.stringify(errs, null, 1));
    }
  }
  process.exit(bad ? 1 : 0);
})().catch((e) => { console.error(e); process.exit(2); });
